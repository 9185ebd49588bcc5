// Package failure says what a failure means to whoever stopped on it: a
// refusal (nothing was changed), a failure a resume cures by itself
// (Transient), or one an operator must fix first. The pipeline, its checks
// and its interlock share these, so each lives here, below all of them.
package failure

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/go-sql-driver/mysql"
	"github.com/shardctl/shardctl/binlog"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/pipeline/fkcheck"
)

// ErrRefused is a refusal before anything was changed (a check, a stale plan).
var ErrRefused = errors.New("refused")

// Errors a run stops with for reasons a resume cures by itself.
var (
	ErrLockLost = errors.New("lost the operation lock on the sharding database")
	ErrBudget   = errors.New("no cutover fitted the blackout budget")
)

// ErrMapCollision marks a cutover that would put the shard at a location
// the shard map already holds under another shard id (registered by hand
// during the plan): deterministic, the operator removes that location.
var ErrMapCollision = errors.New("the shard map holds another shard at the cutover's location")

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
		errors.Is(err, driver.ErrBadConn), errors.Is(err, mysql.ErrInvalidConn), errors.Is(err, dbutil.ErrUnanswered),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	case errors.Is(err, binlog.ErrDDL), errors.Is(err, binlog.ErrForeignRow), errors.Is(err, fkcheck.ErrCrossing), errors.Is(err, ErrMapCollision):
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

// ClassicHashingHint is what to do on a MySQL 9.6+ server that has no MD5().
const ClassicHashingHint = "; MySQL 9.6 and later ship MD5() only in a legacy component: run INSTALL COMPONENT 'file://component_classic_hashing' on it (or split and merge RANGE or LIST maps, which need nothing)"

// ProbeError says which preflight probe failed on which server, and what to
// do where the error says it; err stays wrapped, so a lost connection is still
// resumable and anything else a failure an operator must fix.
func ProbeError(probe, role string, addr string, err error) error {
	hint := ""
	switch {
	case dbutil.IsPrivilegeErr(err):
		hint = ": grant the account the privileges in docs/servers.md"
	case dbutil.IsMissingFunction(err):
		hint = ": the server lacks a function shardctl expected every server to have; report this with the server's version"
	case Transient(err):
		hint = ": the server did not answer; run the same command again once it does (a plan stopped by it resumes with 'shardctl plan resume' and its id, which the stop message names)"
	}
	return fmt.Errorf("preflight: reading %s on the %s %s: %w%s", probe, role, addr, err, hint)
}
