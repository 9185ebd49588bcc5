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
	var changes []string
	th, err := New(context.Background(), nil, Config{MaxLag: time.Second, Replicas: []string{replica},
		OnChange: func(r string) { changes = append(changes, r) }}, sandbox.Creds())
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
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
}
