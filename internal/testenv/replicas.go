package testenv

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/sandbox"
)

// Fleet is a test's own sandbox of one primary with GTID replicas (the
// package's shared sandbox stays three lone servers).
type Fleet struct {
	Config  sandbox.Config
	Servers []sandbox.Server
}

var (
	fleetMu  sync.Mutex
	fleetIDs = 100 // server_id bases of fleets, apart from the shared sandbox's
)

// Replicated starts a sandbox of one primary and n replicas of it, of the
// flavor under test, stopped and removed when the test ends; opts change
// the sandbox's configuration first (Unreported, ExtraArgs).
func Replicated(t testing.TB, n int, opts ...func(*sandbox.Config)) *Fleet {
	t.Helper()
	cfg, srv := upOwn(t, 1, n, opts)
	return &Fleet{Config: cfg, Servers: srv}
}

// Own starts a sandbox of n lone servers of the flavor under test for t
// alone, stopped and removed when the test ends: a test that crashes or
// stops servers on it can run beside the tests on the shared sandbox.
func Own(t testing.TB, n int) *Env {
	t.Helper()
	return OwnWith(t, n)
}

// OwnWith is Own with the servers' configuration changed by opts (extra
// server arguments, say).
func OwnWith(t testing.TB, n int, opts ...func(*sandbox.Config)) *Env {
	t.Helper()
	cfg, srv := upOwn(t, n, 0, opts)
	return &Env{Config: cfg, Servers: srv}
}

// upOwn starts a test's own sandbox of n servers, each with replicas
// replicas, with server_ids apart from every other sandbox's.
func upOwn(t testing.TB, n, replicas int, opts []func(*sandbox.Config)) (sandbox.Config, []sandbox.Server) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs real servers: skipped under -short (scripts/test.sh --fast or the full suite runs it)")
	}
	skipUnavailable(t, serversAvailable())
	fleetMu.Lock()
	fleetIDs += 10
	base := fleetIDs
	fleetMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg, srv, err := UpOnFreePorts(ctx, n*(1+replicas), func(port int) sandbox.Config {
		cfg := sandbox.Config{Dir: t.TempDir(), Servers: n, Replicas: replicas, BasePort: port, Flavor: Flavor(), Version: Version(), ServerIDBase: base, DieWithParent: true, Lean: true}
		for _, o := range opts {
			o(&cfg)
		}
		return cfg
	})
	t.Cleanup(func() { _ = sandbox.Down(context.Background(), cfg, true) })
	if err != nil {
		t.Fatal(err)
	}
	return cfg, srv
}

// Primary is the fleet's primary.
func (f *Fleet) Primary() dbutil.Addr { return f.Servers[0].Addr() }

// Replica is replica k's address (1-based).
func (f *Fleet) Replica(k int) dbutil.Addr { return f.Servers[f.Config.ReplicaIndex(1, k)-1].Addr() }

// Kill kills replica k's process (SIGKILL), as a crash would.
func (f *Fleet) Kill(t testing.TB, k int) {
	t.Helper()
	if err := sandbox.Kill(f.Config, f.Config.ReplicaIndex(1, k)); err != nil {
		t.Fatal(err)
	}
}

// KillPrimary kills the primary's process (SIGKILL), as a crash would.
func (f *Fleet) KillPrimary(t testing.TB) {
	t.Helper()
	if err := sandbox.Kill(f.Config, 1); err != nil {
		t.Fatal(err)
	}
}

// Restart starts whatever of the fleet is not running; a restarted replica
// resumes replicating where it stopped.
func (f *Fleet) Restart(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, err := sandbox.Up(ctx, f.Config)
	if err != nil {
		t.Fatal(err)
	}
	f.Servers = srv
}

// SQLThread stops (false) or starts (true) the SQL thread of the replica db
// talks to: the replica keeps receiving and falls behind.
func SQLThread(t testing.TB, db *sql.DB, run bool) {
	t.Helper()
	verb := "STOP"
	if run {
		verb = "START"
	}
	stmt := verb + " SLAVE SQL_THREAD"
	if MySQL() {
		stmt = verb + " REPLICA SQL_THREAD"
	}
	if _, err := db.Exec(stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}
