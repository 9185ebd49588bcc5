package chunk

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestParseMembers(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"enum('a','b')", []string{"a", "b"}},
		{"set('x')", []string{"x"}},
		{"enum('it''s','back\\\\slash','','a,b')", []string{"it's", "back\\slash", "", "a,b"}},
		{"enum('new\\nline')", []string{"new\nline"}},
	} {
		got, err := ParseMembers(c.in)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseMembers(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"enum", "enum('a)", "enum(a)", "enum('a'x)"} {
		if _, err := ParseMembers(bad); err == nil {
			t.Errorf("ParseMembers(%q) accepted", bad)
		}
	}
}

// ENUM and SET keys travel as their number; an ENUM comparison lists the
// indexes that satisfy it, so the optimizer ranges over them.
func TestEnumKeyTextAndCompare(t *testing.T) {
	e := Column{Name: "e", Type: "ENUM", Kind: Enum, Members: []string{"z", "b", "a"}}
	s := Column{Name: "s", Type: "SET", Kind: Enum, Members: []string{"x", "y", "w"}}
	for _, c := range []struct {
		col  Column
		raw  string
		text string
	}{{e, "z", "1"}, {e, "a", "3"}, {e, "", "0"}, {s, "x,w", "5"}, {s, "", "0"}, {s, "y", "2"}} {
		if got := c.col.Text([]byte(c.raw)); got != c.text {
			t.Errorf("%s %q: text %q, want %q", c.col.Type, c.raw, got, c.text)
		}
	}
	if _, err := e.Arg(e.Text([]byte("q"))); err == nil {
		t.Error("a value that is no member became a key bound")
	}
	k := key(Column{Name: "id", Type: "INT", Kind: Signed}, e)
	sql, args, err := k.Compare(">", []string{"7", "2"})
	want := "(`id` >= ? AND (`id` > ? OR (`id` = ? AND `e` IN (?))))"
	if err != nil || sql != want || !reflect.DeepEqual(args, []any{int64(7), int64(7), int64(7), uint64(3)}) {
		t.Fatalf("got %s %v %v, want %s", sql, args, err, want)
	}
	sql, args, _ = key(e).Compare("<=", []string{"1"})
	if sql != "`e` IN (?,?)" || !reflect.DeepEqual(args, []any{uint64(0), uint64(1)}) {
		t.Fatalf("got %s %v", sql, args)
	}
	if sql, _, _ = key(e).Compare(">", []string{"3"}); sql != "1=0" {
		t.Fatalf("nothing after the last member: %s", sql)
	}
	if sql, _, _ = key(s).Compare(">", []string{"3"}); sql != "`s` > ?" {
		t.Fatalf("SET: %s", sql)
	}
}

// Paging one, two and three rows at a time over keys with ENUM, SET,
// DATETIME(6) and VARBINARY parts visits every row once, in the index's
// order, on the server.
func TestPageKeysOfEveryType(t *testing.T) {
	env := testenv.Get(t)
	db := env.DB(t, 1, "")
	ctx := context.Background()
	testenv.Schema(t, db, "chunk_keys",
		`CREATE TABLE id_e (id INT NOT NULL, e ENUM('zeta','beta','it''s','back\\slash','alpha') NOT NULL, v INT, PRIMARY KEY (id, e))`,
		`INSERT INTO id_e SELECT seq DIV 3, ELT(1 + seq % 5, 'zeta','beta','it''s','back\\slash','alpha'), seq FROM seq_0_to_59`,
		`CREATE TABLE e_id (e ENUM('zeta','beta','alpha') NOT NULL, id INT NOT NULL, PRIMARY KEY (e, id))`,
		`INSERT INTO e_id SELECT ELT(1 + seq % 3, 'zeta','beta','alpha'), seq FROM seq_0_to_29`,
		`CREATE TABLE s_id (s SET('x','y','w') NOT NULL, id INT NOT NULL, PRIMARY KEY (s, id))`,
		`INSERT INTO s_id SELECT ELT(1 + seq % 4, '', 'x,w', 'y', 'w'), seq FROM seq_0_to_19`,
		`CREATE TABLE dt_vb (at DATETIME(6) NOT NULL, b VARBINARY(8) NOT NULL, v INT, PRIMARY KEY (at, b))`,
		`INSERT INTO dt_vb SELECT '2024-02-29 23:59:59' + INTERVAL (seq DIV 4) MICROSECOND, UNHEX(CONCAT(IF(seq % 4 = 0, '', 'FF'), LPAD(HEX(seq % 4), 2, '0'))), seq FROM seq_0_to_39`)
	for _, c := range []struct{ table, order string }{
		{"id_e", "id, e"}, {"e_id", "e, id"}, {"s_id", "s, id"}, {"dt_vb", "at, b"},
	} {
		names := strings.Split(strings.ReplaceAll(c.order, " ", ""), ",")
		k, err := LoadKey(ctx, db, "chunk_keys", c.table, "PRIMARY", names)
		if err != nil {
			t.Fatalf("%s: %v", c.table, err)
		}
		numeric := make([]string, len(names))
		for i, n := range names {
			numeric[i] = n
			if k.Cols[i].Kind == Enum {
				numeric[i] = n + "+0" // the server's own number for the value
			}
		}
		want := testenv.Dump(t, db, "SELECT CONCAT_WS('|', "+strings.Join(numeric, ", ")+") FROM chunk_keys."+c.table+" ORDER BY "+c.order)
		for step := 1; step <= 3; step++ {
			var got []string
			var after []string
			for {
				hi, ok, err := Upper(ctx, db, k, after, "1=1", nil, step)
				if err != nil {
					t.Fatalf("%s: %v", c.table, err)
				}
				if !ok {
					break
				}
				rng, args, err := k.Range(after, hi)
				if err != nil {
					t.Fatal(err)
				}
				rows := testenv.Dump(t, db, "SELECT CONCAT_WS('|', "+strings.Join(numeric, ", ")+") FROM "+dbutil.Table("chunk_keys", c.table)+
					" WHERE "+rng+" ORDER BY "+c.order, args...)
				if len(rows) != step {
					t.Fatalf("%s step %d after %v: chunk of %d rows", c.table, step, after, len(rows))
				}
				got = append(got, rows...)
				after = hi
			}
			rest, args, _ := k.Range(after, nil)
			got = append(got, testenv.Dump(t, db, "SELECT CONCAT_WS('|', "+strings.Join(numeric, ", ")+") FROM "+dbutil.Table("chunk_keys", c.table)+
				" WHERE "+rest+" ORDER BY "+c.order, args...)...)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%s step %d: paged\n%v\nwant\n%v", c.table, step, got, want)
			}
		}
	}
}
