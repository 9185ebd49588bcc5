package pipeline

import (
	"errors"
	"fmt"
	"strings"

	"github.com/shardctl/shardctl/binlog"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/pipeline/failure"
	"github.com/shardctl/shardctl/pipeline/fkcheck"
	"github.com/shardctl/shardctl/pipeline/interlock"
)

// Errors a run stops with for reasons a resume cures by itself; ErrMapCollision
// is deterministic (package failure says which is which).
var (
	ErrLockLost     = failure.ErrLockLost
	ErrBudget       = failure.ErrBudget
	ErrMapCollision = failure.ErrMapCollision
)

// Refusals the interlock and the foreign-key data check stop a run with
// (their packages say when).
var (
	ErrLive     = interlock.ErrLive
	ErrStale    = interlock.ErrStale
	ErrCrossing = fkcheck.ErrCrossing
)

// StepError is a step's failure: where it happened, and whether a resume can
// succeed as things are (Transient: a lost connection, a server restarting, a
// lock wait timeout or deadlock, an interruption, the blackout budget, a lost
// lock) or only once an operator fixed the cause (a foreign key, a missing
// privilege, a missing table, a refused statement, bad data). Either way the
// plan stays resumable. cmd maps Transient to exit 3, the rest to exit 1.
type StepError struct {
	Operation string // move, split, merge
	Shard     string // "shard 3 (shard_3)"
	Step      string
	Transient bool
	Hint      string // what to do; empty for transient failures
	Err       error
}

func (e *StepError) Error() string {
	msg := fmt.Sprintf("%s %s, step %s: %v", e.Operation, e.Shard, e.Step, e.Err)
	if e.Hint != "" {
		msg += "; " + e.Hint
	}
	return msg
}

func (e *StepError) Unwrap() error { return e.Err }

// Transient reports whether err is a failure a resume can cure without an
// operator (failure.Transient).
func Transient(err error) bool { return failure.Transient(err) }

// hint says what to do about a deterministic failure.
func hint(err error, planID string) string {
	resume := fmt.Sprintf("then 'shardctl plan resume %s' continues (or 'shardctl plan abort %s' before cutover)", planID, planID)
	switch n := dbutil.ErrNumber(err); {
	case errors.Is(err, binlog.ErrDDL):
		// A tail resumed with --on-ddl apply reads the rows before the
		// statement with the target's definition and carries it (binlog:
		// shadow); any other resume stops at it again.
		if errors.Is(err, binlog.ErrDDLCarriable) {
			return fmt.Sprintf("a schema change ran on the source during the operation: 'shardctl plan resume %s --on-ddl apply' carries it to the copy at its place in the stream and goes on (docs/ddl.md); a resume without it stops at the statement again; or abort the plan ('shardctl plan abort %s') and start a new one", planID, planID)
		}
		if errors.Is(err, binlog.ErrDDLBeforeStart) {
			return fmt.Sprintf("a schema change ran on the source during the copy: 'shardctl plan resume %s --on-ddl apply' carries it to the copy at its place in the stream and goes on, if that mode carries the statement (docs/ddl.md); a resume without it stops here again; or abort the plan ('shardctl plan abort %s') and start a new one", planID, planID)
		}
		return fmt.Sprintf("a schema change ran on the source during the operation, and this plan's copy cannot follow it (a resume stops at it again): abort the plan ('shardctl plan abort %s') and start a new one", planID)
	case errors.Is(err, binlog.ErrForeignRow):
		return "the two rows named above are different tenants' rows with the same id (the source issued an id the target had already used): give the target's row another id (and the rows that refer to it, on the target; the source's row cannot be renumbered, the tail replays its insert), " + resume
	case errors.Is(err, ErrMapCollision):
		return fmt.Sprintf("once that location is removed, 'shardctl plan resume %s' fences again and cuts over (or 'shardctl plan abort %s' undoes the plan)", planID, planID)
	case errors.Is(err, ErrCrossing):
		return "fix those rows (give each child its parent's shard key, or re-point it): the check runs again when you resume; " + resume
	case n == 1451 || n == 1452 || n == 1216 || n == 1217:
		return "a foreign key refused the statement: check the keys of the table named above (information_schema.REFERENTIAL_CONSTRAINTS) and the rows they name, fix them, " + resume
	case n == 1142 || n == 1143 || n == 1044 || n == 1045 || n == 1227 || n == 1370 || n == 1419:
		return "the shardctl account lacks the privilege the error names, on the server the step writes to: GRANT it, " + resume
	case n == 1146 || n == 1049:
		return "a table or schema the operation works on is missing (dropped or renamed while it ran): put it back, or abort the plan"
	case outOfSpace(err):
		return "free space on that server (its data directory's disk, or the InnoDB tablespace's size limit: innodb_data_file_path's max), or drop what is not needed there; the source was not changed; " + resume
	case n == 1054:
		return "a column is missing (the table changed while the operation ran): abort the plan and start a new one"
	case n == 1062:
		return "a duplicate key on the target: another writer or an earlier operation left rows there; remove them, " + resume
	case n == 1064 || n == 1227 || n == 1235 || n == 1295:
		return "the server refused the statement above (syntax or not supported by this server version): report it, " + resume
	}
	return "fix the cause named above, " + resume
}

// outOfSpace reports a server that could not write for want of space: a
// table or tablespace at its limit (1114), a full disk (1021, or errno 28
// behind 1030, 3 or 1005), InnoDB's "no more room" (errno 135).
func outOfSpace(err error) bool {
	switch dbutil.ErrNumber(err) {
	case 1114, 1021:
		return true
	case 3, 1005, 1030:
		msg := err.Error()
		return strings.Contains(msg, "errno: 28") || strings.Contains(msg, "error 28") || strings.Contains(msg, "errno: 135") || strings.Contains(msg, "No space left")
	}
	return false
}

// classify wraps a step's failure in a StepError.
func classify(op, shard, step, planID string, err error) error {
	se := &StepError{Operation: op, Shard: shard, Step: step, Transient: Transient(err), Err: err}
	if se.Transient {
		se.Err = dbutil.Explain(err) // a connection the watchdog closed: which server, what to check
	} else {
		se.Hint = hint(err, planID)
	}
	return se
}
