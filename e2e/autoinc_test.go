package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/router"
	"github.com/shardctl/shardctl/sandbox"
)

// The AUTO_INCREMENT counter moves with the rows: during a move, a split and
// a merge (under the ledger load, killed after the catch-up and again behind
// the fence, resumed each time) the source issues ids it then loses (the
// highest rows deleted, an insert rolled back). After the cutover the next
// insert on the moved keys' new owner gets an id the source never issued.
func TestAutoIncrementCarried(t *testing.T) {
	st := testenv.NewSubtests(t)
	for i, op := range corpusOps[:3] {
		st.RunParallel(op.name, func(t *testing.T) { // a cluster of its own each: nothing shared but the servers
			c := newCluster(t, fmt.Sprintf("e2e_autoinc%d", i), op.servers, op.sizes)
			c.addTickets()
			// The source's moving keys: the load's "moving" group.
			var moving string
			for _, g := range op.groups(c) {
				if m, ok := strings.CutPrefix(g, "moving="); ok {
					moving = strings.SplitN(m, "-", 2)[0]
				}
			}
			src := ownerOf(t, c, moving)

			lp := c.startLoad(100, op.groups(c)...)
			args := append(op.args(c), "--yes", "--chunk-rows", "100", "--max-blackout", "5s")
			id := c.killedRun("after:catchup", args, nil)
			// While the operation is down (its tail picks all of this up on
			// resume): the highest ids are issued and deleted, an insert rolls back.
			issued := src.issue(t, moving)
			if r := c.run([]string{"SHARDCTL_FAULT=after:fence"}, "plan", "resume", id); !r.killed {
				t.Fatalf("not killed behind the fence: exit %d\n%s", r.code, r.stderr)
			}
			if r := c.run(nil, "plan", "resume", id); r.code != 0 {
				t.Fatalf("plan resume: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
			}
			lp.stop(t)
			c.checkLedger(lp)
			if p, _ := c.onlyPlan(); len(p.Attempts) > 0 {
				a := p.Attempts[len(p.Attempts)-1]
				t.Logf("%s: blackout %.1f ms, of which carrying the counters %.1f ms", op.name, a.BlackoutM, a.Phases["counters"])
			}

			dst := ownerOf(t, c, moving)
			if dst.addr == src.addr && dst.schema == src.schema {
				t.Fatalf("key %s still at %s/%s after the %s", moving, src.addr, src.schema, op.name)
			}
			if next := dst.insert(t, moving); next <= issued {
				t.Fatalf("the next insert on the new owner %s/%s got id %d; the source had issued up to %d", dst.addr, dst.schema, next, issued)
			}
			if op.name == "split" { // the source keeps serving its lower half: its counter stays too
				if next := src.insert(t, fmt.Sprint(c.shards[0].Lower+1)); next <= issued {
					t.Fatalf("the next insert on the split's source got id %d; it had issued up to %d", next, issued)
				}
			}
		})
	}
}

// The reverse window's switch carries the counter back: ids the target
// issued and lost while it served are not issued again by the source after
// 'plan revert' (run with no process in the window, after a kill -9).
func TestAutoIncrementCarriedBack(t *testing.T) {
	c := newCluster(t, "e2e_autoinc_back", []int{1, 1}, []int{200, 100})
	c.addTickets()
	key := fmt.Sprint(c.shards[0].Lower + 1)
	lp := c.startLoad(100, c.keys("moving", 1, 200), c.keys("staying", 2, 100))
	mv := c.run([]string{"SHARDCTL_FAULT=during:window"}, "move", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes",
		"--reverse-window", "3m", "--max-blackout", "5s", "--chunk-rows", "100")
	if !mv.killed {
		t.Fatalf("not killed in the window: exit %d\n%s", mv.code, mv.stderr)
	}
	p, _ := c.onlyPlan()
	id := p.ID
	if p.Window == nil || p.Window.Serving != plans.SideTarget {
		t.Fatalf("not in the window with the target serving: %+v", p.Window)
	}
	issued := ownerOf(t, c, key).issue(t, key)
	c.mustRun("plan", "revert", id, "--wait", "60s")
	lp.stop(t)
	c.checkLedger(lp)
	back := ownerOf(t, c, key)
	if back.addr != c.env.Addr(1).String() {
		t.Fatalf("after revert key %s is at %s", key, back.addr)
	}
	if next := back.insert(t, key); next <= issued {
		t.Fatalf("after revert the source's next insert got id %d; the target had issued up to %d", next, issued)
	}
}

// addTickets gives every shard an AUTO_INCREMENT table sharded on emp_no.
// Its ids are the employees' numbers at first, so a merge's shards do not
// collide, and each shard's counter starts far above them, a lower shard's
// above a higher one's.
func (c *cluster) addTickets() {
	c.addTicketsCounter("1000000000000000 - (SELECT MIN(emp_no) FROM employees) * 1000")
}

// addTicketsCounter is addTickets with each shard's counter set to the SQL
// expression counter (evaluated in the shard's schema).
func (c *cluster) addTicketsCounter(counter string) {
	t := c.t
	for _, sh := range c.shards {
		db := c.env.DB(t, c.serverIndex(sh.Server), "")
		execScript(t, db, sh.Schema, `CREATE TABLE tickets (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, emp_no INT NOT NULL, note VARCHAR(20) NOT NULL, KEY (emp_no));
			INSERT INTO tickets (id, emp_no, note) SELECT emp_no, emp_no, 'seed' FROM employees;
			SET @raise = CONCAT('ALTER TABLE tickets AUTO_INCREMENT = ', `+counter+`);
			PREPARE raise FROM @raise;
			EXECUTE raise;
			DEALLOCATE PREPARE raise`)
	}
	if err := c.store.AddColumn(ctx, "tickets", "emp_no", "employees"); err != nil {
		t.Fatal(err)
	}
}

// owner is where the router sends a key's writes.
type owner struct {
	db     *sql.DB
	addr   string
	schema string
}

// ownerOf asks a fresh router (closed at the test's end) where key lives.
func ownerOf(t *testing.T, c *cluster, key string) owner {
	t.Helper()
	rt := router.New(c.store, router.Options{Creds: sandbox.Creds(), TTL: testMapTTL, RetryFor: 30 * time.Second})
	t.Cleanup(rt.Close)
	var o owner
	if err := rt.Do(ctx, "employees", key, func(_ context.Context, tg router.Target) error {
		o = owner{db: tg.DB, addr: tg.Addr().String(), schema: tg.Schema}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return o
}

// insert adds a ticket for emp_no and returns its id.
func (o owner) insert(t *testing.T, emp string) int64 {
	t.Helper()
	res, err := o.db.Exec("INSERT INTO "+dbutil.Table(o.schema, "tickets")+" (emp_no, note) VALUES (?, 'next')", emp)
	if err != nil {
		t.Fatal(err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// issue issues ids the rows will not keep: a high one inserted and deleted,
// the next one inserted and deleted, the one after rolled back. It returns
// the highest id issued.
func (o owner) issue(t *testing.T, emp string) int64 {
	t.Helper()
	const high = 1 << 40 // above every employee number (the seeded ids)
	tb := dbutil.Table(o.schema, "tickets")
	if _, err := o.db.Exec("INSERT INTO "+tb+" (id, emp_no, note) VALUES (?, ?, 'high')", high, emp); err != nil {
		t.Fatal(err)
	}
	if _, err := o.db.Exec("DELETE FROM "+tb+" WHERE id = ?", high); err != nil {
		t.Fatal(err)
	}
	next := o.insert(t, emp)
	if _, err := o.db.Exec("DELETE FROM "+tb+" WHERE id = ?", next); err != nil {
		t.Fatal(err)
	}
	tx, err := o.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	res, err := tx.Exec("INSERT INTO "+tb+" (emp_no, note) VALUES (?, 'rolled back')", emp)
	if err != nil {
		t.Fatal(err)
	}
	last, err := res.LastInsertId()
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if last <= next || next <= high {
		t.Fatalf("ids issued: %d then %d", next, last)
	}
	return last
}

// Two shards made from one database have equal counters: a merge raises the
// target's counter itself (shown in --dry-run), so under the ledger load,
// killed after the copy and resumed, with both shards issuing ids while it
// is down, it finishes with nothing edited by hand and both shards' new rows
// kept. Both shards live on server 1 with the shard map, so its general log
// orders every statement: none between the fence and the cutover's switch
// reads information_schema.
func TestMergeEqualCounters(t *testing.T) {
	c := newCluster(t, "e2e_mergectr", []int{1, 1}, []int{200, 200})
	c.addTicketsCounter("10000000")
	dry := c.mustRun("merge", "--shard", "2", "--into", "1", "--dry-run")
	if !strings.Contains(dry.stdout, "tickets`"+" AUTO_INCREMENT = 20000000;") {
		t.Fatalf("--dry-run does not show the target's counter raised to 20000000:\n%s", dry.stdout)
	}
	moving, staying := fmt.Sprint(c.shards[1].Lower+1), fmt.Sprint(c.shards[0].Lower+1)
	src, dst := ownerOf(t, c, moving), ownerOf(t, c, staying)
	lp := c.startLoad(100, c.keys("moving", 2, 200), c.keys("staying", 1, 200))
	if r := c.run([]string{"SHARDCTL_FAULT=after:copy"}, "merge", "--shard", "2", "--into", "1", "--yes", "--chunk-rows", "100", "--max-blackout", "5s"); !r.killed {
		t.Fatalf("not killed after the copy: exit %d\n%s", r.code, r.stderr)
	}
	// Both shards issue ids while the merge is down; its tail copies the
	// merged shard's.
	fromSrc, fromDst := src.insert(t, moving), dst.insert(t, staying)
	if fromSrc == fromDst || fromDst < 20000000 {
		t.Fatalf("ids issued: %d on the merged shard, %d on the target (want the target's from 20000000 on)", fromSrc, fromDst)
	}
	p, _ := c.onlyPlan()
	log := generalLog(t, c.db(1))
	if r := c.run(nil, "plan", "resume", p.ID); r.code != 0 {
		t.Fatalf("plan resume: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	blackout := log.stop(t)
	lp.stop(t)
	c.checkLedger(lp)

	merged := ownerOf(t, c, moving)
	for id, emp := range map[int64]string{fromSrc: moving, fromDst: staying} {
		if got := testenv.Dump(t, merged.db, "SELECT emp_no FROM "+dbutil.Table(merged.schema, "tickets")+" WHERE id = ?", id); len(got) != 1 || got[0] != `"`+emp+`"` {
			t.Fatalf("ticket %d after the merge: %v, want emp_no %s", id, got, emp)
		}
	}
	if next := merged.insert(t, moving); next <= fromDst {
		t.Fatalf("the next insert after the merge got id %d; the target had issued %d", next, fromDst)
	}

	// The blackout on the general log: from the fence row set on the merged
	// shard to the cutover's change of the shard map's ranges.
	from := -1
	for i, q := range blackout {
		if strings.Contains(q, dbutil.FenceTable) && strings.Contains(q, "SET fenced = 1") {
			from = i
		}
		if from >= 0 && strings.HasPrefix(q, "DELETE FROM `e2e_mergectr`.`ranges`") {
			for _, q := range blackout[from:i] {
				if strings.Contains(strings.ToLower(q), "information_schema") {
					t.Errorf("in the blackout: %s", q)
				}
			}
			t.Logf("%d statements in the blackout", i-from)
			return
		}
	}
	t.Fatalf("no fence and cutover found on the general log (%d statements)", len(blackout))
}

// loggedStatements is server 1's general log, switched on for a while.
type loggedStatements struct {
	db     *sql.DB
	output string
}

// generalLog starts logging every statement of the server to the table mysql.general_log.
func generalLog(t *testing.T, db *sql.DB) *loggedStatements {
	t.Helper()
	l := &loggedStatements{db: db}
	if err := db.QueryRow("SELECT @@GLOBAL.log_output").Scan(&l.output); err != nil {
		t.Fatal(err)
	}
	testenv.Exec(t, db, "SET GLOBAL general_log = 0")
	testenv.Exec(t, db, "TRUNCATE TABLE mysql.general_log")
	testenv.Exec(t, db, "SET GLOBAL log_output = 'TABLE'")
	testenv.Exec(t, db, "SET GLOBAL general_log = 1")
	t.Cleanup(func() { l.off() })
	return l
}

func (l *loggedStatements) off() {
	l.db.Exec("SET GLOBAL general_log = 0")
	l.db.Exec("SET GLOBAL log_output = ?", l.output)
}

// stop switches the log off and returns the statements it holds, in order.
func (l *loggedStatements) stop(t *testing.T) []string {
	t.Helper()
	l.off()
	rows, err := l.db.Query("SELECT argument FROM mysql.general_log WHERE command_type IN ('Query', 'Execute')")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var q []byte
		if err := rows.Scan(&q); err != nil {
			t.Fatal(err)
		}
		out = append(out, string(q))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	l.db.Exec("TRUNCATE TABLE mysql.general_log") // tidying only: the next generalLog truncates it first
	return out
}

// One tenant with 36 tickets moved back and forth between two LIST shards
// whose counters are equal (shards made from one database), a ticket added
// on its owner after each move: each move raises the receiving shard's
// counter at most the key move's margin above the larger counter, never by
// the source's counter, and no id meets another. Then, with the two servers
// interleaving ids (auto_increment_increment 2, offsets 1 and 2), a move
// raises nothing: the plan says so and the target's counter moves only past
// the rows it is given. The run with the real binary, on both flavors.
func TestKeyMoveCountersBackAndForth(t *testing.T) {
	const (
		start  = 2_792_100 // the issue's payment counter
		margin = 10_000    // pipeline.keyMoveMargin
		moves  = 4
	)
	c := newClusterSeed(t, "e2e_ctr_keys", []int{1, 2}, sandbox.SeedConfig{Sizes: []int{100, 100}, List: true})
	c.addTicketsCounter(fmt.Sprint(start))
	key := fmt.Sprint(c.shards[0].Lower + 1)
	shard := func(i int) (*sql.DB, string) { return c.db(c.serverIndex(c.shards[i].Server)), c.shards[i].Schema }
	counters := func() [2]uint64 {
		t.Helper()
		var out [2]uint64
		for i := range out {
			db, schema := shard(i)
			out[i] = ticketsCounter(t, db, schema)
		}
		return out
	}
	src := ownerOf(t, c, key)
	for range 36 {
		src.insert(t, key)
	}
	first := counters()
	t.Logf("%s: before: shard 1 %d, shard 2 %d (36 tickets of tenant %s on shard 1)", testenv.Flavor(), first[0], first[1], key)
	dry := c.mustRun("move", "--shard", "1", "--keys", key, "--into", "2", "--dry-run")
	if want := fmt.Sprintf("tickets`"+" AUTO_INCREMENT = %d;", first[0]+margin); !strings.Contains(dry.stdout, want) {
		t.Fatalf("--dry-run does not show the raise to the source's counter plus %d (%q):\n%s", margin, want, dry.stdout)
	}
	last, seen := first, map[int64]bool{}
	for i := range moves {
		from, into := 1+i%2, 2-i%2
		c.mustRun("move", "--shard", fmt.Sprint(from), "--keys", key, "--into", fmt.Sprint(into), "--yes", "--max-blackout", "5s")
		now := counters()
		if now[from-1] != last[from-1] {
			t.Errorf("move %d: the source's counter went %d -> %d", i+1, last[from-1], now[from-1])
		}
		if hi := max(last[0], last[1]) + margin; now[into-1] > hi {
			t.Errorf("move %d: the target's counter went %d -> %d, above the larger counter plus the margin (%d)", i+1, last[into-1], now[into-1], hi)
		}
		o := ownerOf(t, c, key)
		if want := c.shards[into-1].Schema; o.schema != want {
			t.Fatalf("move %d: tenant %s at %s, want %s", i+1, key, o.schema, want)
		}
		id := o.insert(t, key)
		if seen[id] || uint64(id) < last[from-1] {
			t.Fatalf("move %d: the next ticket got id %d, issued before or below the source's counter %d", i+1, id, last[from-1])
		}
		seen[id] = true
		t.Logf("%s: move %d (shard %d -> %d): shard 1 %d, shard 2 %d; the tenant's next ticket: id %d", testenv.Flavor(), i+1, from, into, now[0], now[1], id)
		last = counters()
	}
	if grew, bound := max(last[0], last[1])-max(first[0], first[1]), uint64(moves*(margin+1)); grew > bound {
		t.Fatalf("after %d moves the counters grew by %d, want at most %d", moves, grew, bound)
	}

	// A source that outruns the margin while the move is down (killed after
	// the catch-up): its next ticket for the moving tenant takes the
	// target's raised counter. The resume raises the target's counter again
	// before the tail and the cutover go on, and the move finishes.
	from, into := 1+moves%2, 2-moves%2
	id := c.killedRun("after:catchup", []string{"move", "--shard", fmt.Sprint(from), "--keys", key, "--into", fmt.Sprint(into), "--yes", "--max-blackout", "5s"}, planFiles(t, c.planDir))
	guard := counters()[into-1]
	fromDB, fromSchema := shard(from - 1)
	if _, err := fromDB.Exec("INSERT INTO "+dbutil.Table(fromSchema, "tickets")+" (id, emp_no, note) VALUES (?, ?, 'outran')", guard, key); err != nil {
		t.Fatal(err)
	}
	if r := c.resumeUntil(id, "resume after the source outran the margin", ""); r.code != 0 {
		t.Fatalf("resume: exit %d\n%s", r.code, r.stderr)
	}
	o := ownerOf(t, c, key)
	if o.schema != c.shards[into-1].Schema {
		t.Fatalf("outran: tenant %s at %s after the resume", key, o.schema)
	}
	if next := o.insert(t, key); uint64(next) <= guard+1 {
		t.Fatalf("outran: the next ticket on the target got id %d; the source had issued %d", next, guard)
	}
	last = counters()
	t.Logf("%s: outran (a ticket with id %d, the target's raised counter): resumed, shard 1 %d, shard 2 %d", testenv.Flavor(), guard, last[0], last[1])

	// Interleaved ids: nothing raised.
	db1, _ := shard(0)
	db2, _ := shard(1)
	testenv.SetGlobal(t, db1, "auto_increment_increment", 2)
	testenv.SetGlobal(t, db2, "auto_increment_increment", 2)
	testenv.SetGlobal(t, db1, "auto_increment_offset", 1)
	testenv.SetGlobal(t, db2, "auto_increment_offset", 2)
	from, into = into, from
	dry = c.mustRun("move", "--shard", fmt.Sprint(from), "--keys", key, "--into", fmt.Sprint(into), "--dry-run")
	if !strings.Contains(dry.stdout, "interleave ids") || strings.Contains(dry.stdout, "AUTO_INCREMENT =") {
		t.Fatalf("interleaved ids: --dry-run shows a raise or no word of the interleaving:\n%s", dry.stdout)
	}
	fromDB, fromSchema = shard(from - 1)
	var top uint64
	if err := fromDB.QueryRow("SELECT MAX(id) FROM "+dbutil.Table(fromSchema, "tickets")+" WHERE emp_no = ?", key).Scan(&top); err != nil {
		t.Fatal(err)
	}
	c.mustRun("move", "--shard", fmt.Sprint(from), "--keys", key, "--into", fmt.Sprint(into), "--yes", "--max-blackout", "5s")
	now := counters()
	if now[into-1] > max(last[into-1], top+2) {
		t.Fatalf("interleaved ids: the target's counter went %d -> %d; the rows it was given end at id %d", last[into-1], now[into-1], top)
	}
	t.Logf("%s: interleaved, move shard %d -> %d: shard 1 %d, shard 2 %d (the moved rows' highest id %d)", testenv.Flavor(), from, into, now[0], now[1], top)
}

// ticketsCounter reads the tickets table's AUTO_INCREMENT counter from
// information_schema, uncached (MySQL 8+ answers it from a cache of
// information_schema_stats_expiry seconds otherwise).
func ticketsCounter(t *testing.T, db *sql.DB, schema string) uint64 {
	t.Helper()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if testenv.Flavor() == sandbox.FlavorMySQL {
		if _, err := conn.ExecContext(ctx, "SET SESSION information_schema_stats_expiry = 0"); err != nil {
			t.Fatal(err)
		}
	}
	var n uint64
	if err := conn.QueryRowContext(ctx, "SELECT AUTO_INCREMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'tickets'", schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
