package pipeline

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/shardctl/shardctl/binlog"
	"github.com/shardctl/shardctl/dbutil"
)

// Errors a run stops with for reasons a resume cures by itself.
var (
	ErrLockLost = errors.New("lost the operation lock on the sharding database")
	ErrBudget   = errors.New("no cutover fitted the blackout budget")
)

// ErrMapCollision marks a cutover that would put the shard at a location
// the shard map already holds under another shard id (registered by hand
// during the plan): deterministic, the operator removes that location.
var ErrMapCollision = errors.New("the shard map holds another shard at the cutover's location")

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
// operator: the connection or the server went away, a lock wait or deadlock,
// the run was interrupted (Ctrl-C, SIGTERM) or hit the blackout budget, or it
// lost its lock. Any other server error is deterministic: running the same
// statement again fails the same way.
func Transient(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, ErrLockLost), errors.Is(err, ErrBudget),
		errors.Is(err, driver.ErrBadConn), errors.Is(err, mysql.ErrInvalidConn),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	case errors.Is(err, binlog.ErrDDL), errors.Is(err, ErrCrossing), errors.Is(err, ErrMapCollision):
		return false
	}
	switch dbutil.ErrNumber(err) {
	case 0:
		var ne net.Error
		if errors.As(err, &ne) {
			return true
		}
		// Not a server error (our own checks, the binlog stream): as before,
		// a resume is worth trying.
		return true
	case 1205, 1213, // lock wait timeout, deadlock
		1040, 1053, 1077, 1079, 1080, // too many connections, server shutdown, connection closed/killed
		1152, 1158, 1159, 1160, 1161, // aborted connection, network read/write errors
		1317, 1927, 1969, 3024, // query interrupted, connection killed, statement time limits
		2002, 2003, 2006, 2013, 2055, // client: cannot connect, server gone, lost connection
		1290, 1836, 1792: // read-only server (failover), read-only transaction
		return true
	}
	return false
}

// hint says what to do about a deterministic failure.
func hint(err error, planID string) string {
	resume := fmt.Sprintf("then 'shardctl plan resume %s' continues (or 'shardctl plan abort %s' before cutover)", planID, planID)
	switch n := dbutil.ErrNumber(err); {
	case errors.Is(err, binlog.ErrDDL):
		// A resumed tail reads the rows before the statement with the table's
		// new definition: it stops at the statement again, whatever --on-ddl says.
		next := "and start a new one"
		if errors.Is(err, binlog.ErrDDLCarriable) {
			next = "and start a new one; with --on-ddl apply a plan carries a change like this one to its copy while it runs (docs/ddl.md)"
		}
		return fmt.Sprintf("a schema change ran on the source during the operation, and this plan's copy cannot follow it (a resume stops at it again): abort the plan ('shardctl plan abort %s') %s", planID, next)
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
	if !se.Transient {
		se.Hint = hint(err, planID)
	}
	return se
}
