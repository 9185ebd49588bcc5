package pipeline

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/testenv"
)

func TestRetentionRisk(t *testing.T) {
	for _, c := range []struct {
		rows, maxRate int64
		retention     time.Duration
		warn          bool
	}{
		{rows: 1_000_000, retention: 0},                                                // never purged
		{rows: 1_000_000, retention: 24 * time.Hour},                                   // 50 s of copy
		{rows: 1_000_000, retention: 90 * time.Second, warn: true},                     // 50 s is more than half of it
		{rows: 1_000_000, maxRate: 10, retention: 24 * time.Hour, warn: true},          // 100,000 s at --max-rate 10
		{rows: 1_000_000, maxRate: 1_000_000, retention: 90 * time.Second, warn: true}, // a high --max-rate is no faster than the conservative rate
		{rows: 0, retention: time.Second},
	} {
		why := retentionRisk(c.rows, c.maxRate, c.retention, "binlog_expire_logs_seconds")
		if (why != "") != c.warn {
			t.Errorf("%+v: %q", c, why)
		}
		if c.warn && !strings.Contains(why, "raise binlog_expire_logs_seconds") {
			t.Errorf("%+v: %q", c, why)
		}
	}
}

// The retention is read from the server as it is set, on both flavors.
func TestBinlogRetentionRead(t *testing.T) {
	env := testenv.Get(t)
	db := env.DB(t, 1, "")
	testenv.SetGlobal(t, db, "binlog_expire_logs_seconds", 600)
	d, variable, err := binlogRetention(context.Background(), db)
	if err != nil || d != 600*time.Second || variable != "binlog_expire_logs_seconds" {
		t.Fatalf("%s %s %v", d, variable, err)
	}
}
