package e2e

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/sandbox"
)

// verify and prune on a LIST shard after a key move work per tenant: the
// shard owns a set of list points, not a range. Shard 1 is first moved to
// server 3 keeping its old copy on server 1 (a copy that still holds every
// tenant); then tenants 11-13 move into shard 2. verify of shard 1 against
// the old copy compares only the tenants shard 1 still owns (the moved
// tenants' rows, there and changed, are not its business; an owned tenant's
// change is found), and prune of shard 1 removes exactly the moved tenants'
// rows put back into it, none of any tenant it owns, and nothing from the
// shard that took them.
func TestKeyMoveVerifyPrune(t *testing.T) {
	c := newClusterSeed(t, "e2e_keyprune", []int{1, 2}, sandbox.SeedConfig{Sizes: []int{150, 150}, List: true})
	sch1 := c.shards[0].Schema
	old := c.env.Addr(1).String()
	c.mustRun("move", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes", "--keep-source")
	c.mustRun("move", "--shard", "1", "--keys", "11,12,13", "--into", "2", "--yes")
	live := c.db(3) // shard 1, after the move

	verify := func(want int) verifyJSON {
		t.Helper()
		r := c.run(nil, "verify", "--shard", "1", "--against", old, "--chunk-rows", "50", "-o", "json")
		var got verifyJSON
		if err := json.Unmarshal([]byte(r.stdout), &got); r.code != want || err != nil {
			t.Fatalf("verify: exit %d, want %d (%v)\n%s\n%s", r.code, want, err, r.stdout, r.stderr)
		}
		return got
	}
	verify(0)
	// A moved tenant's row changed in the old copy: not shard 1's.
	execOn(t, c.db(1), fence.BypassSQL, "UPDATE "+dbutil.Table(sch1, "employees")+" SET last_name = 'Moved' WHERE emp_no = 12")
	verify(0)
	// An owned tenant's row changed there: found, and only it.
	execOn(t, c.db(1), fence.BypassSQL, "UPDATE "+dbutil.Table(sch1, "employees")+" SET last_name = 'Owned' WHERE emp_no = 14")
	if rows := rowsNamed(verify(5).Mismatches); len(rows) != 1 || !strings.HasPrefix(rows[0], "employees 14 differs") {
		t.Fatalf("verify named %q, want employees 14 only", rows)
	}

	// Put the moved tenants' rows back into shard 1 (a stale restore).
	sums := c.fleetSums(nil)
	for _, tb := range sandbox.ShardedTables {
		copyRows(t, c.db(2), c.shards[1].Schema, live, sch1, tb, "emp_no IN (11, 12, 13)")
	}
	tenantRows := func(keys string) int64 {
		var n int64
		for _, tb := range sandbox.ShardedTables {
			n += one[int64](t, live, "SELECT COUNT(*) FROM "+dbutil.Table(sch1, tb)+" WHERE emp_no IN ("+keys+")")
		}
		return n
	}
	planted := tenantRows("11, 12, 13")
	if planted == 0 {
		t.Fatal("no rows planted")
	}
	ownedBefore := tenantRows("1, 2, 14, 150")
	var dry []struct {
		Table       string
		WouldDelete int64 `json:"would_delete"`
		Deleted     int64
	}
	if err := json.Unmarshal([]byte(c.mustRun("prune", "--shard", "1", "--dry-run", "-o", "json").stdout), &dry); err != nil {
		t.Fatal(err)
	}
	var would int64
	for _, d := range dry {
		would += d.WouldDelete
	}
	if would != planted {
		t.Errorf("prune --dry-run would delete %d rows, want the %d planted: %+v", would, planted, dry)
	}
	c.mustRun("prune", "--shard", "1", "--chunk-rows", "7")
	if n := tenantRows("11, 12, 13"); n != 0 {
		t.Errorf("prune left %d rows of the moved tenants on shard 1", n)
	}
	if n := tenantRows("1, 2, 14, 150"); n != ownedBefore {
		t.Errorf("prune changed owned tenants' rows: %d -> %d", ownedBefore, n)
	}
	// Shard 2 owns its tenants and the moved ones: nothing to prune.
	dry = nil
	if err := json.Unmarshal([]byte(c.mustRun("prune", "--shard", "2", "--dry-run", "-o", "json").stdout), &dry); err != nil {
		t.Fatal(err)
	}
	for _, d := range dry {
		if d.WouldDelete != 0 {
			t.Errorf("prune of shard 2 would delete %d %s rows", d.WouldDelete, d.Table)
		}
	}
	c.ownership()
	after := c.fleetSums(nil)
	for tb, v := range sums {
		if after[tb] != v {
			t.Errorf("%s: fleet sum %s -> %s", tb, v, after[tb])
		}
	}
}

// execOn runs statements in order on one session of db.
func execOn(t *testing.T, db *sql.DB, stmts ...string) {
	t.Helper()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range stmts {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// copyRows copies the rows of table tb that where selects from one schema to
// another, through the test (the schemas may be on different servers).
func copyRows(t *testing.T, from *sql.DB, fromSchema string, to *sql.DB, toSchema, tb, where string) {
	t.Helper()
	rows, err := from.Query("SELECT * FROM " + dbutil.Table(fromSchema, tb) + " WHERE " + where)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	for rows.Next() {
		vals, ptrs := dbutil.Dest[any](len(cols))
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		if _, err := to.Exec("INSERT INTO "+dbutil.Table(toSchema, tb)+" VALUES ("+dbutil.Placeholders(len(cols))+")", vals...); err != nil {
			t.Fatal(err)
		}
	}
}

// A tenant's child that references its parent by the parent's own id
// (tasks.project_id -> projects.id, no tenant_id in the key) is checked on
// the rows by a key move: a task of tenant 11 pointed at tenant 12's project
// would be separated from it, so moving tenant 11 alone is refused with the
// rows named and nothing changed, onto a new shard and into an existing
// one; moving both tenants keeps them together.
func TestKeyMoveChecksChildrenByID(t *testing.T) {
	c := newClusterSeed(t, "e2e_keyfk", []int{1, 2}, sandbox.SeedConfig{Sizes: []int{40, 40}, List: true})
	c.loadCorpus("../testdata/schemas/tenants", "tenant_id")
	execOn(t, c.db(1), "UPDATE "+dbutil.Table(c.shards[0].Schema, "tasks")+" SET project_id = 1201 WHERE id = 11011")
	// The same on shard 2, whose tenants move into shard 1 (a key move into
	// an existing shard): its task of tenant L+11 points at L+12's project.
	lo := c.shards[1].Lower
	execOn(t, c.db(2), fmt.Sprintf("UPDATE %s SET project_id = %d WHERE id = %d", dbutil.Table(c.shards[1].Schema, "tasks"), (lo+12)*100+1, ((lo+11)*100+1)*10+1))
	v0, _ := c.store.Version(ctx)
	for _, args := range [][]string{
		{"move", "--shard", "1", "--keys", "11", "--to", c.env.Addr(3).String(), "--yes"},
		{"move", "--shard", "2", "--keys", fmt.Sprint(lo + 11), "--into", "1", "--yes"},
	} {
		r := c.run(nil, args...)
		if r.code != 2 || !strings.Contains(r.stderr, "rows would end on another shard") || !strings.Contains(r.stderr, "tasks") {
			t.Fatalf("%v separates a task from its project: exit %d, want 2 naming tasks\n%s\n%s", args, r.code, r.stdout, r.stderr)
		}
	}
	if v, _ := c.store.Version(ctx); v != v0 {
		t.Errorf("the refused moves changed the shard map: version %d -> %d", v0, v)
	}
	if files := planFiles(t, c.planDir); len(files) != 0 {
		t.Errorf("the refused move left plan files: %v", files)
	}
	for _, args := range [][]string{
		{"move", "--shard", "1", "--keys", "11,12", "--to", c.env.Addr(3).String(), "--dry-run"},
		{"move", "--shard", "2", "--keys", fmt.Sprintf("%d,%d", lo+11, lo+12), "--into", "1", "--dry-run"},
	} {
		if r := c.run(nil, args...); r.code != 0 {
			t.Fatalf("%v (both tenants): exit %d\n%s", args, r.code, r.stderr)
		}
	}
}
