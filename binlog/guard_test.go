package binlog

import (
	"errors"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/keyspace"
)

// TestTailIntoExistingKeepsTargetRows: a tail into an existing shard (a
// merge, a key move) never replaces or deletes a row the target holds for a
// key outside the moving keys. The source's tenant 3 moves into a target
// that serves tenant 7: a source row of tenant 3 with an id (or a unique
// value) of a tenant 7 row stops the tail with ErrForeignRow naming both,
// and tenant 7's row is intact; a source insert and delete of such an id
// (one batch: only the delete reaches the target) leaves it alone. A moving
// row whose id reaches the guard (Config.IDGuards) stops the tail (ErrIDGuard).
func TestTailIntoExistingKeepsTargetRows(t *testing.T) {
	p := newPair(t, "bl_foreign", `CREATE TABLE pay (id INT AUTO_INCREMENT PRIMARY KEY, tenant INT NOT NULL,
		code VARCHAR(20) NULL, v INT, UNIQUE KEY ucode (code), KEY (tenant))`)
	src, dst := dbutil.Table(p.schema, "pay"), dbutil.Table(p.target(), "pay")
	tx(t, p.src, "INSERT INTO "+src+" VALUES (10, 3, 'S3-a', 1), (20, 5, 'S5-a', 1)")
	tx(t, p.dst, "INSERT INTO "+dst+" VALUES (10, 3, 'S3-a', 1), (42, 7, 'T7-A', 1), (43, 7, 'T7-B', 1)") // 10: copied
	tbs := p.tables(t, "pay")
	tbs[0].Filter = keyspace.Filter{Column: "tenant", Points: []keyspace.Key{keyspace.IntK(3)}}
	cfg := func(from Position) Config {
		c := p.config(t, from, tbs)
		c.IntoExisting = true
		return c
	}
	tenant7 := []string{`"42" | "7" | "T7-A" | "1"`, `"43" | "7" | "T7-B" | "1"`}
	intact := func() {
		t.Helper()
		got := targetRows(t, p, "tenant = 7")
		if strings.Join(got, "\n") != strings.Join(tenant7, "\n") {
			t.Fatalf("tenant 7's rows on the target changed:\n%s", strings.Join(got, "\n"))
		}
	}

	// Replays of the moving key's own rows, new rows, a row of a key that
	// stays behind with a target's id, an insert and delete of a target's id.
	begin := masterStatus(t, p.src)
	tx(t, p.src, "UPDATE "+src+" SET v = 2 WHERE id = 10", "INSERT INTO "+src+" VALUES (11, 3, 'S3-b', 1)")
	tx(t, p.src, "INSERT INTO "+src+" VALUES (42, 5, 'S5-b', 1)") // not moving: skipped
	tx(t, p.src, "INSERT INTO "+src+" VALUES (43, 3, 'S3-c', 1)", "DELETE FROM "+src+" WHERE id = 43")
	tl := start(t, cfg(begin))
	waitFor(t, tl, masterStatus(t, p.src))
	if err := tl.Stop(); err != nil {
		t.Fatal(err)
	}
	intact()
	if got := strings.Join(targetRows(t, p, "tenant = 3"), "\n"); got != `"10" | "3" | "S3-a" | "2"`+"\n"+`"11" | "3" | "S3-b" | "1"` {
		t.Fatalf("tenant 3 on the target:\n%s", got)
	}

	// A moving row with a tenant 7 row's primary key, then one with its unique code.
	pk := masterStatus(t, p.src)
	tx(t, p.src, "DELETE FROM "+src+" WHERE id = 42", "INSERT INTO "+src+" VALUES (42, 3, 'S3-d', 1)")
	uniq := masterStatus(t, p.src)
	tx(t, p.src, "INSERT INTO "+src+" VALUES (12, 3, 'T7-B', 1)")
	// A moving row at the target's raised counter (the guard): stopped
	// before it drags the target's counter into the source's next ids.
	outrun := masterStatus(t, p.src)
	tx(t, p.src, "INSERT INTO "+src+" VALUES (500, 3, 'S3-e', 1)")
	for _, c := range []struct {
		from Position
		err  error
		want []string
	}{
		{pk, ErrForeignRow, []string{"table pay", "key tenant=3", "PRIMARY (id)=(42)", "primary key (id)=(42) of key tenant=7", "genuine id collision"}},
		{uniq, ErrForeignRow, []string{"table pay", "key tenant=3", "ucode (code)=(T7-B)", "primary key (id)=(43) of key tenant=7"}},
		{outrun, ErrIDGuard, []string{"table bl_foreign.pay", "id = 500", "counter 500"}},
	} {
		cf := cfg(c.from)
		cf.IDGuards = map[string]IDGuard{"pay": {Column: "id", Guard: 500}}
		tl := start(t, cf)
		err := stopped(t, tl, "at the collision")
		if !errors.Is(err, c.err) {
			t.Fatalf("stopped with %v, want %v", err, c.err)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error lacks %q: %v", w, err)
			}
		}
		if tl.Applied() != c.from {
			t.Errorf("applied moved to %s past the collision", tl.Applied())
		}
		intact()
	}
	if got := targetRows(t, p, "id = 500"); len(got) != 0 {
		t.Fatalf("the row at the guard was applied: %v", got)
	}
}

func targetRows(t *testing.T, p pair, where string) []string {
	t.Helper()
	return testenv.Dump(t, p.dst, "SELECT * FROM "+dbutil.Table(p.target(), "pay")+" WHERE "+where+" ORDER BY id")
}
