package throttle

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/sandbox"
)

// waitReason polls th.Wait's verdict until the throttler's reason holds want
// ("" : until a Wait returns at once).
func waitReason(t *testing.T, th *Throttler, want string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := th.Wait(ctx, 0)
		cancel()
		got := th.Reason()
		switch {
		case want == "" && err == nil:
			return
		case want != "" && strings.Contains(got, want):
			return
		case err != nil && ctx.Err() == nil:
			t.Fatalf("Wait stopped with %v (reason %q): a replica must pause the work, never stop it", err, got)
		}
	}
	t.Fatalf("the throttler's reason is %q, want %q", th.Reason(), want)
}

// A real GTID replica of the flavor under test: lag is read with the
// statement the server takes (MySQL 9.7 has no SHOW SLAVE STATUS), a stopped
// SQL thread and a dead replica pause the work and say so, and the work goes
// on once the replica is back.
func TestReplicaLagPausesAndResumes(t *testing.T) {
	f := testenv.Replicated(t, 1)
	replica := f.Replica(1).String()
	pdb, err := dbutil.Open(context.Background(), f.Primary(), sandbox.Creds(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer pdb.Close()
	// A replica registers with its source once its IO thread has connected,
	// a moment after it starts: wait for it (bounded) before asking. Until
	// it is listed, its dump thread may already show, and Discover refuses
	// an unlisted reader: asked again.
	var got []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		got, err = Discover(context.Background(), pdb, "the source")
		if err == nil && len(got) == 1 || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || len(got) != 1 || got[0] != replica {
		t.Fatalf("Discover = %q, %v; want [%s]", got, err, replica)
	}
	cfg := Config{MaxLag: time.Second, Replicas: []string{replica}}
	if w, err := Probe(context.Background(), pdb, cfg, sandbox.Creds()); err != nil || len(w) != 1 || w[0].Side != "source" {
		t.Fatalf("Probe = %+v, %v; want the replica under the source", w, err)
	}
	var changes []string
	cfg.OnChange = func(r string) { changes = append(changes, r) }
	th, err := New(context.Background(), pdb, cfg, sandbox.Creds())
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			th.Close()
		}
	}()
	waitReason(t, th, "")

	rdb, err := dbutil.Open(context.Background(), f.Replica(1), sandbox.Creds(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	testenv.SQLThread(t, rdb, false)
	waitReason(t, th, "SQL thread stopped")
	testenv.SQLThread(t, rdb, true)
	waitReason(t, th, "")

	f.Kill(t, 1)
	waitReason(t, th, "cannot read the lag of replica "+replica)
	f.Restart(t)
	waitReason(t, th, "")
	if len(changes) < 4 || changes[len(changes)-1] != "" {
		t.Fatalf("OnChange was told %q; want each pause and each end of one", changes)
	}
	th.Close()
	closed = true
	var n int
	if err := pdb.QueryRow("SELECT COUNT(*) FROM " + heartbeatTable).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the heartbeat rows after Close: %d, %v; want none", n, err)
	}
}

// The heartbeat gives a sub-second lag (under 500 ms on a replica that
// keeps up), and with the SQL thread held back the lag is the time it was
// held, not NULL. Probe refuses a server that is no replica.
func TestHeartbeatLagAndProbe(t *testing.T) {
	f := testenv.Replicated(t, 1)
	pdb, err := dbutil.Open(context.Background(), f.Primary(), sandbox.Creds(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer pdb.Close()
	if _, err := Probe(context.Background(), pdb, Config{MaxLag: time.Second, Replicas: []string{f.Primary().String()}}, sandbox.Creds()); err == nil || !strings.Contains(err.Error(), "not a replica") {
		t.Fatalf("Probe of the primary itself = %v; want 'not a replica'", err)
	}
	hb, err := startHeartbeat(context.Background(), pdb)
	if err != nil {
		t.Fatal(err)
	}
	defer hb.close()
	rdb, err := dbutil.Open(context.Background(), f.Replica(1), sandbox.Creds(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	id, err := serverID(context.Background(), pdb)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		lag, err := heartbeatLag(context.Background(), rdb, id)
		if err == nil && lag < 500*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("heartbeat lag %s, %v; want under 500ms on a replica that keeps up", lag, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	testenv.SQLThread(t, rdb, false)
	time.Sleep(1500 * time.Millisecond) // the held-back SQL thread is what is measured, not a timing
	if lag, err := heartbeatLag(context.Background(), rdb, id); err != nil || lag < time.Second {
		t.Fatalf("heartbeat lag with the SQL thread stopped 1.5 s: %s, %v; want at least 1s", lag, err)
	}
	testenv.SQLThread(t, rdb, true)
}
