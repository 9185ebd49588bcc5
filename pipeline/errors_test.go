package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/shardctl/shardctl/binlog"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/pipeline/failure"
)

func TestTransientOrDeterministic(t *testing.T) {
	my := func(n uint16) error {
		return fmt.Errorf("prune s.t: delete the chunk: %w", &mysql.MySQLError{Number: n, Message: "x"})
	}
	for _, c := range []struct {
		err       error
		transient bool
		hint      string
	}{
		{my(1205), true, ""},
		{my(1213), true, ""},
		{my(2013), true, ""},
		{fmt.Errorf("copy: %w", context.Canceled), true, ""},
		{fmt.Errorf("x: %w", ErrLockLost), true, ""},
		{fmt.Errorf("%w (1s) in 3 attempts", ErrBudget), true, ""},
		{my(1451), false, "foreign key"},
		{my(1142), false, "GRANT"},
		{my(1146), false, "missing"},
		{my(1064), false, "refused"},
		{fmt.Errorf("binlog tail: %w at x (%w)", binlog.ErrDDL, binlog.ErrDDLCarriable), false, "'shardctl plan resume move-1 --on-ddl apply' carries it"},
		{fmt.Errorf("binlog tail: %w at x", binlog.ErrDDL), false, "abort the plan ('shardctl plan abort move-1') and start a new one"},
		{fmt.Errorf("binlog tail: %w (%w)", binlog.ErrDDL, binlog.ErrDDLBeforeStart), false, "'shardctl plan resume move-1 --on-ddl apply' carries it"},
	} {
		err := classify("move", "shard 1 (s1)", "cleanup", "move-1", c.err)
		var se *StepError
		if !errors.As(err, &se) || se.Transient != c.transient {
			t.Errorf("%v: transient %v, want %v", c.err, se != nil && se.Transient, c.transient)
			continue
		}
		if !strings.Contains(err.Error(), "step cleanup") || (dbutil.ErrNumber(c.err) != 0 && !strings.Contains(err.Error(), "s.t")) {
			t.Errorf("%v: message %q does not name the step and table", c.err, err)
		}
		if c.hint != "" && (!strings.Contains(se.Hint, c.hint) || !strings.Contains(se.Hint, "plan")) {
			t.Errorf("%v: hint %q", c.err, se.Hint)
		}
		if !errors.Is(err, c.err) {
			t.Errorf("%v: the cause is not kept", c.err)
		}
	}
}

// A preflight probe's failure names the probe and the server and says what to
// do, and keeps the server's error, so a lost connection stays resumable and
// the rest is a failure to fix; MySQL's answers to a missing MD5() (1046
// without a default schema, 1305 with one) read as a missing function.
func TestProbeErrorSaysWhatFailedWhere(t *testing.T) {
	my := func(n uint16) error { return &mysql.MySQLError{Number: n, Message: "x"} }
	for _, c := range []struct {
		err       error
		transient bool
		hint      string
	}{
		{my(1142), false, "grant the account"},
		{my(1046), false, "lacks a function"},
		{my(2013), true, "run the same command again"},
		{my(1064), false, ""},
	} {
		err := failure.ProbeError("the binlog settings", "source", "127.0.0.1:3307", c.err)
		msg := err.Error()
		if !strings.Contains(msg, "the binlog settings on the source 127.0.0.1:3307") || !strings.Contains(msg, c.hint) || !errors.Is(err, c.err) || Transient(err) != c.transient {
			t.Errorf("%v: %q (transient %v)", c.err, msg, Transient(err))
		}
	}
	if !dbutil.IsMissingFunction(my(1046)) || !dbutil.IsMissingFunction(my(1305)) || dbutil.IsMissingFunction(my(1146)) {
		t.Error("IsMissingFunction")
	}
}
