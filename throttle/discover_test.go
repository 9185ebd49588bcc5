package throttle

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/binlog"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/sandbox"
)

// TestDiscoverReplicaWithoutReportHost: a real replica started without
// report_host and report_port registers with no host; discovery takes the
// host its binlog dump thread connects from (the processlist) and the port
// it registered with (its own).
func TestDiscoverReplicaWithoutReportHost(t *testing.T) {
	f := testenv.Replicated(t, 1, func(c *sandbox.Config) { c.Unreported = true })
	pdb := openFleet(t, f.Primary())
	waitDumpThreads(t, pdb, 1)
	got, err := Discover(context.Background(), pdb, "the source")
	if err != nil || len(got) != 1 || got[0] != f.Replica(1).String() {
		t.Fatalf("Discover = %q, %v; want [%s] (host from the dump thread)", got, err, f.Replica(1))
	}
}

// TestDiscoverReportsUnregisteredReader: a binlog reader that does not
// register (mysqlbinlog --stop-never, as a replica that never registers
// would look) shows only in the processlist. Discovery cannot tell its port
// and reports it, naming the connection, rather than leave it out.
func TestDiscoverReportsUnregisteredReader(t *testing.T) {
	f := testenv.Replicated(t, 1)
	pdb := openFleet(t, f.Primary())
	waitDumpThreads(t, pdb, 1)
	files, err := binlog.BinaryLogs(context.Background(), pdb)
	if err != nil {
		t.Fatal(err)
	}
	testenv.BinlogReader(t, f.Primary(), files[0])
	waitDumpThreads(t, pdb, 2)
	got, err := Discover(context.Background(), pdb, "the source")
	if err == nil || !strings.Contains(err.Error(), "2 binlog dump connection(s)") || !strings.Contains(err.Error(), "lists 1 replica") {
		t.Fatalf("Discover = %q, %v; want an error naming the unregistered dump connection", got, err)
	}
	t.Logf("reported: %v", err)
}

// TestDiscoveredReplicaUnreachable: a replica that registers an address
// nothing listens on is discovered, and Probe (the planning check) refuses
// it by name rather than watching the other replicas without it.
func TestDiscoveredReplicaUnreachable(t *testing.T) {
	const closed = "127.0.0.1:1" // tcpmux: nothing listens there
	f := testenv.Replicated(t, 1, func(c *sandbox.Config) {
		c.ExtraArgs = append(c.ExtraArgs, "--report-port=1")
	})
	pdb := openFleet(t, f.Primary())
	waitDumpThreads(t, pdb, 1)
	cfg := Config{MaxLag: time.Second, Discover: true}
	w, err := Probe(context.Background(), pdb, cfg, sandbox.Creds())
	if err == nil || !strings.Contains(err.Error(), "replica "+closed) {
		t.Fatalf("Probe = %+v, %v; want an error naming the unreachable replica %s", w, err, closed)
	}
	t.Logf("reported: %v", err)
}

func openFleet(t *testing.T, a dbutil.Addr) *sql.DB {
	t.Helper()
	db, err := dbutil.Open(context.Background(), a, sandbox.Creds(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// waitDumpThreads waits (bounded) until the source serves n binlog dump
// connections: a replica connects a moment after it starts.
func waitDumpThreads(t *testing.T, db *sql.DB, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		d, err := dumpThreads(context.Background(), db)
		if err != nil {
			t.Fatal(err)
		}
		if len(d) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the source has %d binlog dump connections after 30 s, want %d", len(d), n)
		}
	}
}
