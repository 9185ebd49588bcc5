package dbutil

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Flavor is a server's kind and version. Every SQL form that differs between
// MariaDB and Oracle MySQL is chosen here, so the rest of the code asks the
// flavor rather than testing versions itself.
type Flavor struct {
	MySQL   bool   // Oracle MySQL (or a compatible fork); false: MariaDB
	Version string // VERSION() as the server reports it
	Major   int
	Minor   int
}

// Name is "mysql" or "mariadb" (also go-mysql's flavor names).
func (f Flavor) Name() string {
	if f.MySQL {
		return "mysql"
	}
	return "mariadb"
}

func (f Flavor) String() string { return f.Name() + " " + f.Version }

// ParseFlavor reads VERSION() and @@version_comment.
func ParseFlavor(version, comment string) Flavor {
	f := Flavor{Version: version}
	low := strings.ToLower(version + " " + comment)
	f.MySQL = !strings.Contains(low, "mariadb")
	if !f.MySQL {
		// MariaDB before 11 prefixed its handshake's version for old clients.
		version = strings.TrimPrefix(version, "5.5.5-")
	}
	nums := strings.SplitN(strings.SplitN(version, "-", 2)[0], ".", 3)
	if len(nums) >= 2 {
		f.Major, _ = strconv.Atoi(nums[0])
		f.Minor, _ = strconv.Atoi(nums[1])
	}
	return f
}

var flavors sync.Map // *sql.DB -> Flavor

// FlavorOf detects (once per pool) which server db talks to.
func FlavorOf(ctx context.Context, db *sql.DB) (Flavor, error) {
	if f, ok := flavors.Load(db); ok {
		return f.(Flavor), nil
	}
	f, err := DetectFlavor(ctx, db)
	if err != nil {
		return f, err
	}
	flavors.Store(db, f)
	return f, nil
}

// DetectFlavor asks the server.
func DetectFlavor(ctx context.Context, q Querier) (Flavor, error) {
	var v, c string
	if err := q.QueryRowContext(ctx, "SELECT VERSION(), @@version_comment").Scan(&v, &c); err != nil {
		return Flavor{}, fmt.Errorf("read the server version: %w", err)
	}
	return ParseFlavor(v, c), nil
}

func (f Flavor) atLeast(major, minor int) bool {
	return f.Major > major || f.Major == major && f.Minor >= minor
}

// Older reports a version before o's (major and minor; flavors not compared).
func (f Flavor) Older(o Flavor) bool { return !f.atLeast(o.Major, o.Minor) }

// HasVector reports VECTOR columns: MariaDB 11.7+, MySQL 9.0+.
func (f Flavor) HasVector() bool {
	if f.MySQL {
		return f.atLeast(9, 0)
	}
	return f.atLeast(11, 7)
}

// BinlogStatusSQL shows the current binlog file and position (first two
// columns). MySQL 8.4 removed SHOW MASTER STATUS.
func (f Flavor) BinlogStatusSQL() string {
	if f.MySQL && f.atLeast(8, 2) {
		return "SHOW BINARY LOG STATUS"
	}
	return "SHOW MASTER STATUS"
}

// ReplicaStatusSQL shows a replica's replication state. MySQL 8.4 removed
// SHOW SLAVE STATUS (8.0.22 added SHOW REPLICA STATUS; every 8.0 still takes
// the old form); MariaDB takes SHOW REPLICA STATUS from 10.5. The columns are
// named …_Source/Replica_… or …_Master/Slave_… depending on the server:
// read them by name (ReplicaColumn).
func (f Flavor) ReplicaStatusSQL() string {
	if f.MySQL && f.atLeast(8, 1) || !f.MySQL && f.atLeast(10, 5) {
		return "SHOW REPLICA STATUS"
	}
	return "SHOW SLAVE STATUS"
}

// shardctl's binlog tails register with a server_id in [TailServerIDMin,
// TailServerIDMin+TailServerIDSpan): replica discovery tells them from servers by it.
const (
	TailServerIDMin  = 1_000_000
	TailServerIDSpan = 1_000_000_000
)

// ReplicaHostsSQL lists the replicas connected to a server (Server_Id,
// Host, Port as each reports them): MySQL 8.4 removed SHOW SLAVE HOSTS.
func (f Flavor) ReplicaHostsSQL() string {
	if f.MySQL && f.atLeast(8, 1) {
		return "SHOW REPLICAS"
	}
	return "SHOW SLAVE HOSTS"
}

// ReplicaColumn finds a column of SHOW REPLICA|SLAVE STATUS by either of its
// names (newName as MySQL 8.0.22+ spells it: Seconds_Behind_Source,
// Replica_SQL_Running; the older spelling is derived); -1 when neither is there.
func ReplicaColumn(cols []string, newName string) int {
	old := strings.NewReplacer("Source", "Master", "Replica", "Slave").Replace(newName)
	for i, c := range cols {
		if strings.EqualFold(c, newName) || strings.EqualFold(c, old) {
			return i
		}
	}
	return -1
}

// BoundedStatement prefixes stmt so the server stops it after d, when the
// server can do that for DDL (MariaDB's max_statement_time). On MySQL it
// returns stmt unchanged and false: the caller bounds it with KILL QUERY
// (max_execution_time covers SELECT only).
func (f Flavor) BoundedStatement(stmt string, d time.Duration) (string, bool) {
	if f.MySQL {
		return stmt, false
	}
	return fmt.Sprintf("SET STATEMENT max_statement_time = %.3f FOR ", max(d.Seconds(), 0.001)) + stmt, true
}

// IsStatementTimeout reports an error of a statement stopped by its time
// limit or by KILL QUERY.
func IsStatementTimeout(err error) bool {
	switch ErrNumber(err) {
	case 1969, 3024, 1317: // max_statement_time (MariaDB), max_execution_time (MySQL), query interrupted (KILL QUERY)
		return true
	}
	return false
}

// KillQueryAfter arranges for the statement running on connection id to be
// killed (from another connection of db) once d has passed; the returned
// stop cancels that if the statement ended first.
func KillQueryAfter(db *sql.DB, id int64, d time.Duration) (stop func()) {
	t := time.AfterFunc(d, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = db.ExecContext(ctx, "KILL QUERY "+strconv.FormatInt(id, 10))
	})
	return func() { t.Stop() }
}

// Pairable refuses a pair of servers shardctl does not move between. Same
// flavor: any pair. Across flavors (the target receives only SQL, and table
// definitions are translated: package xflavor) the versions whose
// differences are known: MariaDB 10.11 and later, MySQL 8.0 and later.
func Pairable(src, dst Flavor) error {
	if src.MySQL == dst.MySQL {
		return nil
	}
	for _, f := range []Flavor{src, dst} {
		if f.MySQL && !f.atLeast(8, 0) || !f.MySQL && !f.atLeast(10, 11) {
			return fmt.Errorf("the source runs %s and the target %s: shardctl moves between MariaDB and MySQL from MariaDB 10.11 and MySQL 8.0 on (%s is older); upgrade it, or choose a target of the same kind", src, dst, f)
		}
	}
	return nil
}

// Known refuses a server version whose differences shardctl has not been
// taught: a newer major version may change what shardctl reads (the binlog's
// events, SHOW statements, information_schema, privileges, collations), and
// a silent difference there is worse than a refusal. Known: MariaDB 10.6 to
// 11.8 (10.11 and 11.8 tested), MySQL 8.0 to 9.7 (9.7 tested); the matrix
// is in docs/servers.md.
func (f Flavor) Known() error {
	lo, hi, name := [2]int{10, 6}, [2]int{11, 8}, "MariaDB 10.6 to 11.8"
	if f.MySQL {
		lo, hi, name = [2]int{8, 0}, [2]int{9, 7}, "MySQL 8.0 to 9.7"
	}
	if f.atLeast(lo[0], lo[1]) && !f.atLeast(hi[0], hi[1]+1) {
		return nil
	}
	return fmt.Errorf("%s is a version shardctl does not know (it knows %s; docs/servers.md lists what is tested): use a server of a known version, or a shardctl release that knows this one", f, name)
}

// CrossFlavor reports a MariaDB/MySQL pair.
func CrossFlavor(a, b Flavor) bool { return a.MySQL != b.MySQL }

// ServerIdentitySQL names the server in one value: MySQL's server_uuid;
// MariaDB has none, so its server_id, host name and port.
func (f Flavor) ServerIdentitySQL() string {
	if f.MySQL {
		return "SELECT @@server_uuid"
	}
	return "SELECT CONCAT(@@server_id, '@', @@hostname, ':', @@port)"
}

// IsMissingFunction reports the errors of a call to a built-in function the
// server does not have (MD5() on MySQL 9.6+ as installed): 1305 and 1630
// (FUNCTION x does not exist), and 1046 (no database selected), which is what
// MySQL answers when it takes an unknown function for a stored function and
// the session has no default schema.
func IsMissingFunction(err error) bool {
	switch ErrNumber(err) {
	case 1046, 1305, 1630:
		return true
	}
	return false
}

// IsPrivilegeErr reports an error that no retry cures: the account lacks a
// privilege (or, for triggers on a server with a binlog, SUPER or
// log_bin_trust_function_creators).
func IsPrivilegeErr(err error) bool {
	switch ErrNumber(err) {
	case 1044, 1142, 1227, 1419: // DB access denied, table access denied, specific access denied, SUPER needed for triggers
		return true
	}
	return false
}
