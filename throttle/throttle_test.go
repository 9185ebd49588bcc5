package throttle

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type gaugeFunc func(ctx context.Context) (string, error)

func (f gaugeFunc) Over(ctx context.Context) (string, error) { return f(ctx) }

// A gauge that cannot read its metric stops the chunk: the throttler fails closed.
func TestUnreadableMetricFailsClosed(t *testing.T) {
	bad := errors.New("cannot read")
	th := &Throttler{gauges: []Gauge{gaugeFunc(func(context.Context) (string, error) { return "", bad })}}
	if err := th.Wait(context.Background(), 100); !errors.Is(err, bad) {
		t.Fatalf("Wait = %v, want the metric's error", err)
	}
}

// A gauge over its limit holds the chunk until it is not.
func TestGaugeOverHolds(t *testing.T) {
	calls := 0
	th := &Throttler{gauges: []Gauge{gaugeFunc(func(context.Context) (string, error) {
		calls++
		if calls < 2 {
			return "throttled: test", nil
		}
		return "", nil
	})}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := th.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if calls < 2 || th.Reason() != "" {
		t.Fatalf("calls %d, reason %q", calls, th.Reason())
	}
}

func TestControlFilePauses(t *testing.T) {
	f := filepath.Join(t.TempDir(), "control")
	if err := os.WriteFile(f, []byte("pause = true # hold\nmax-rate=5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	th := &Throttler{opts: Config{ControlFile: f}}
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	if err := th.Wait(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait while paused = %v", err)
	}
	if th.Reason() != "paused by the control file" || th.rate != 5 {
		t.Fatalf("reason %q, rate %d", th.Reason(), th.rate)
	}
}

// SHOW REPLICA STATUS is read by column name, in either spelling: MySQL
// 8.0.22+ (…_Source, Replica_…) and MariaDB/older MySQL (…_Master, Slave_…).
func TestParseReplicaStatusBothSpellings(t *testing.T) {
	ns := func(s string) sql.NullString { return sql.NullString{String: s, Valid: true} }
	for _, c := range []struct {
		cols []string
		vals []sql.NullString
		want ReplicaState
	}{
		{[]string{"Replica_IO_State", "Source_Host", "Source_Port", "Replica_IO_Running", "Replica_SQL_Running", "Last_SQL_Error", "Seconds_Behind_Source"},
			[]sql.NullString{ns("Waiting"), ns("10.0.0.7"), ns("3306"), ns("Yes"), ns("Yes"), ns(""), ns("7")},
			ReplicaState{IORunning: true, SQLRunning: true, Behind: sql.NullInt64{Int64: 7, Valid: true}, Source: "10.0.0.7:3306"}},
		{[]string{"Slave_IO_State", "Master_Host", "Master_Port", "Slave_IO_Running", "Slave_SQL_Running", "Last_SQL_Error", "Seconds_Behind_Master"},
			[]sql.NullString{ns(""), ns("db1"), ns("3307"), ns("Yes"), ns("No"), ns("boom"), {}},
			ReplicaState{IORunning: true, LastError: "boom", Source: "db1:3307"}},
	} {
		got, err := parseReplicaStatus(c.cols, c.vals)
		if err != nil || got != c.want {
			t.Errorf("%v: %+v, %v; want %+v", c.cols, got, err, c.want)
		}
	}
	if _, err := parseReplicaStatus([]string{"Slave_IO_Running", "Slave_SQL_Running"}, make([]sql.NullString, 2)); err == nil {
		t.Error("a status without a lag column was read")
	}
}

// Every lag sample that is not a fresh, readable lag under the ceiling is a
// reason to wait, never an error that stops the run.
func TestLagSampleReasons(t *testing.T) {
	now := time.Now()
	ok := ReplicaState{IORunning: true, SQLRunning: true, Behind: sql.NullInt64{Valid: true}}
	late := ok
	late.Behind.Int64 = 5
	stopped := ReplicaState{IORunning: true}
	for _, c := range []struct {
		s    sample
		want string // "" or a part of the reason
	}{
		{sample{at: now, st: ok}, ""},
		{sample{}, "no lag reading"},
		{sample{at: now.Add(-10 * time.Second), st: ok}, "old"},
		{sample{at: now, err: errors.New("connection refused")}, "cannot read the lag of replica r1: connection refused"},
		{sample{at: now, st: stopped}, "SQL thread stopped"},
		{sample{at: now, st: late, lag: 5 * time.Second}, "lags 5s > 1s"},
	} {
		got := c.s.reason("r1", time.Second, now, now)
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%+v: reason %q, want %q", c.s, got, c.want)
		}
	}
	g := &lagGauge{name: "r1", max: time.Second, started: now, first: make(chan struct{})}
	close(g.first)
	g.last = sample{at: now, err: errors.New("gone")}
	if reason, err := g.Over(context.Background()); err != nil || reason == "" {
		t.Fatalf("an unreadable replica: reason %q, err %v; want a reason and no error", reason, err)
	}
}
