package tables

import (
	"context"
	"fmt"
	"testing"

	"github.com/shardctl/shardctl/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// A table without a primary key is identified by its best UNIQUE key over
// NOT NULL columns, chosen as gh-ost does; keys over a nullable column, a
// FLOAT or a prefix are never chosen.
func TestInspectChoosesUniqueKey(t *testing.T) {
	env := testenv.Get(t)
	db := env.DB(t, 1, "")
	testenv.Schema(t, db, "tables_uk",
		"CREATE TABLE pk (id INT NOT NULL PRIMARY KEY, code INT NOT NULL, UNIQUE KEY code (code))",
		// the narrower integer wins over the string and the wider pair
		"CREATE TABLE three (name VARCHAR(20) NOT NULL, a BIGINT NOT NULL, b SMALLINT NOT NULL, c INT NOT NULL, n INT, "+
			"UNIQUE KEY by_name (name), UNIQUE KEY ab (a, b), UNIQUE KEY by_c (c), UNIQUE KEY by_n (n))",
		// the fewest columns among equals
		"CREATE TABLE pair (x INT NOT NULL, y INT NOT NULL, UNIQUE KEY xy (x, y), UNIQUE KEY yx_only (y))",
		"CREATE TABLE strings (s VARCHAR(20) NOT NULL, UNIQUE KEY s (s))",
		"CREATE TABLE nullable (n INT, UNIQUE KEY n (n))",
		"CREATE TABLE float_key (f FLOAT NOT NULL, UNIQUE KEY f (f))",
		"CREATE TABLE prefix (t VARCHAR(200) NOT NULL, UNIQUE KEY t (t(10)))",
		"CREATE TABLE nokey (a INT)")
	ts, err := Inspect(context.Background(), db, "tables_uk")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"pk": "PRIMARY [id]", "three": "by_c [c]", "pair": "yx_only [y]", "strings": "s [s]",
		"nullable": "PRIMARY []", "float_key": "PRIMARY []", "prefix": "PRIMARY []", "nokey": "PRIMARY []",
	}
	for _, tb := range ts {
		if got := fmt.Sprintf("%s %v", tb.Index(), tb.PK); got != want[tb.Name] {
			t.Errorf("%s: key %s, want %s", tb.Name, got, want[tb.Name])
		}
	}
	if len(ts) != len(want) {
		t.Errorf("%d tables, want %d", len(ts), len(want))
	}
}
