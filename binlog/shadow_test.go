package binlog

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/shardctl/shardctl/dbutil"
)

// TestStartShadowsAChangedTable: with --on-ddl apply, a tail that starts
// after several changes of a listed table (the copy's case: the source's
// current definition holds all of them) reads each row event with the
// definition the table had when it was written, the target's, which gets
// each change at its place in the stream: rows before, between and after an
// ADD COLUMN, a DROP COLUMN and a RENAME COLUMN arrive in their columns, and
// the target ends equal to the source. The table's new columns are reported
// once each change ran. Stop and ignore still refuse such a start.
func TestStartShadowsAChangedTable(t *testing.T) {
	p := newPair(t, "bl_shadow", "CREATE TABLE t (id INT PRIMARY KEY, v INT, u VARCHAR(10))")
	tbs := p.tables(t, "t")
	tb := dbutil.Table(p.schema, "t")
	begin := masterStatus(t, p.src)
	tx(t, p.src, "INSERT INTO "+tb+" VALUES (1, 10, 'a'), (2, 20, 'b')")
	exec(t, p.src, "ALTER TABLE "+tb+" ADD COLUMN w INT NOT NULL DEFAULT 7")
	tx(t, p.src, "INSERT INTO "+tb+" VALUES (3, 30, 'c', 33)", "UPDATE "+tb+" SET w = 11 WHERE id = 1")
	exec(t, p.src, "ALTER TABLE "+tb+" DROP COLUMN v")
	tx(t, p.src, "INSERT INTO "+tb+" (id, u, w) VALUES (4, 'd', 44)", "UPDATE "+tb+" SET u = 'bb' WHERE id = 2")
	exec(t, p.src, "ALTER TABLE "+tb+" RENAME COLUMN u TO uu")
	tx(t, p.src, "INSERT INTO "+tb+" (id, uu, w) VALUES (5, 'e', 55)", "DELETE FROM "+tb+" WHERE id = 3")
	for _, mode := range []string{DDLStop, DDLIgnore} {
		cfg := p.config(t, begin, tbs)
		cfg.OnDDL = mode
		if _, err := Start(context.Background(), cfg); !errors.Is(err, ErrDDL) {
			t.Fatalf("--on-ddl %s: Start over a changed table: %v", mode, err)
		}
	}
	cfg := p.config(t, begin, tbs)
	cfg.OnDDL = DDLApply
	var mu sync.Mutex
	var reported []string
	cfg.OnCarried = func(_ context.Context, d CarriedDDL) error {
		mu.Lock()
		defer mu.Unlock()
		reported = append(reported, strings.Join(d.Columns, ","))
		return nil
	}
	tl := start(t, cfg)
	waitFor(t, tl, masterStatus(t, p.src))
	p.same(t, "t", "id")
	mu.Lock()
	defer mu.Unlock()
	// Each change: reported before it ran (columns not known yet), then after.
	if got := strings.Join(reported, ";"); got != ";id,v,u,w;;id,u,w;;id,uu,w" {
		t.Fatalf("reported columns %q", got)
	}
}
