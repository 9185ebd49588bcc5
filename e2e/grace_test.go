package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/router"
	"github.com/shardctl/shardctl/sandbox"
)

// A router still on the shard map it cached before the cutover sends its
// writes to the old copy. The fence turns them away only while the row is
// there: a DELETE that matches no row fires no trigger and succeeds. Before
// the route grace, the cleanup pruned the old copy a few ms after the switch,
// and such a router's acknowledged deletes vanished (a ledger failure of
// TestRebalanceFromCron: "present at its shard 4 … but was deleted"). Here a
// router whose cache is fresh at the switch deletes a key every few ms
// through the switch and the cleanup, and every delete it was told succeeded
// must have happened.
func TestStaleRouterWritesNeverVanish(t *testing.T) {
	testenv.FlavorNeutral(t)
	alongside(t)
	st := testenv.NewSubtests(t)
	for _, op := range []string{"move", "split"} {
		st.Run(op, func(t *testing.T) { staleRouterDeletes(t, op) })
	}
}

func staleRouterDeletes(t *testing.T, op string) {
	c := newCluster(t, "e2e_grace_"+op, []int{1}, []int{1000})
	src := c.db(1)
	var keys []int64
	rows, err := src.Query("SELECT emp_no FROM " + dbutil.Table(c.shards[0].Schema, "employees") + " ORDER BY emp_no")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k int64
		rows.Scan(&k)
		keys = append(keys, k)
	}
	rows.Close()

	// The routers' contract: --route-grace is at least their TTL. The
	// cutover must come within half of it (the deletes follow, inside the
	// TTL): 2.5 s left a loaded CI machine 1.25 s, too little twice.
	const ttl = 4 * time.Second
	hold := filepath.Join(c.dir, "hold")
	os.WriteFile(hold, nil, 0o600)
	args := []string{op, "--shard", "1", "--to", c.env.Addr(2).String(), "--yes", "--no-verify",
		"--postpone-cutover-file", hold, "--route-grace", "4.5s", "-o", "json"}
	if op == "split" {
		keys = keys[len(keys)/2:] // the moving half
		args = append(args, "--at", fmt.Sprint(keys[0]))
	}
	bg := c.start(args...)
	deadline := time.Now().Add(60 * time.Second)
	for !c.hasPlan(plans.StepFence, op) {
		if time.Now().After(deadline) {
			t.Fatalf("the %s never reached its cutover", op)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r := router.New(c.store, router.Options{Creds: sandbox.Creds(), TTL: ttl})
	defer r.Close()
	if _, err := r.Resolve(ctx, "employees", fmt.Sprint(keys[0])); err != nil {
		t.Fatal(err)
	}
	primed := time.Now()
	os.Remove(hold)
	// The router writes nothing during the blackout (a write turned away by
	// the fence would make it look again): its first write after the
	// switch goes where its cache, still trusted, says.
	for !c.cutOver(op) {
		if time.Since(primed) > ttl/2 {
			t.Fatalf("no cutover within %s of removing the hold file", ttl/2)
		}
		time.Sleep(10 * time.Millisecond)
	}
	switchSeen := time.Now()
	// Without the grace, a cleanup of this size was over by now.
	time.Sleep(800 * time.Millisecond)
	var deleted []int64
	var last time.Time
	for i := 0; i < len(keys) && time.Since(primed) < ttl-100*time.Millisecond; i++ {
		k := keys[i]
		err := r.Do(ctx, "employees", fmt.Sprint(k), func(ctx context.Context, t router.Target) error {
			_, err := t.DB.ExecContext(ctx, "DELETE FROM "+t.Table("employees")+" WHERE emp_no = ?", k)
			return err
		})
		if err != nil {
			t.Fatalf("delete %d: %v", k, err)
		}
		deleted, last = append(deleted, k), time.Now()
		time.Sleep(8 * time.Millisecond)
	}
	res := bg.wait(t, 90*time.Second)
	if res.code != 0 {
		t.Fatalf("%s: exit %d\n%s\n%s", op, res.code, res.stdout, res.stderr)
	}
	p, err := plans.Load(planFiles(t, c.planDir)[0])
	if err != nil {
		t.Fatal(err)
	}
	var switched time.Time
	for _, a := range p.Attempts {
		if strings.HasPrefix(a.Result, "cut over") {
			switched = a.Started.Add(time.Duration(a.BlackoutM * float64(time.Millisecond)))
		}
	}
	if switched.IsZero() || switched.After(switchSeen) || !last.After(switched.Add(800*time.Millisecond)) {
		t.Fatalf("the deletes ended at %s, the switch was at %s: the test did not write through a stale cache after the switch", last.Format(time.StampMilli), switched.Format(time.StampMilli))
	}
	t.Logf("%d deletes through a cache primed %s before the switch; the last %s after it", len(deleted), switched.Sub(primed).Round(time.Millisecond), last.Sub(switched).Round(time.Millisecond))
	for s := 1; s <= 3; s++ {
		db := c.db(s)
		for _, schema := range c.schemasOn(db) {
			for _, k := range deleted {
				var n int
				if err := db.QueryRow("SELECT COUNT(*) FROM "+dbutil.Table(schema, "employees")+" WHERE emp_no = ?", k).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n != 0 {
					t.Errorf("server %d, %s: emp_no %d is there, but the router was told its delete succeeded", s, schema, k)
				}
			}
		}
	}
}

// cutOver reports that op's plan switched the shard map.
func (c *cluster) cutOver(op string) bool {
	for _, f := range planFiles(c.t, c.planDir) {
		if p, err := plans.Load(f); err == nil && p.Operation == op && p.Step(plans.StepCutover).State == plans.Done {
			return true
		}
	}
	return false
}

// schemasOn lists the cluster's shard schemas on a server.
func (c *cluster) schemasOn(db *sql.DB) []string {
	rows, err := db.Query("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE ?", likePrefix(c.name)+"\\_s%")
	if err != nil {
		c.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		rows.Scan(&s)
		out = append(out, s)
	}
	return out
}
