package throttle

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/shardctl/shardctl/dbutil"
)

// Discover lists the replicas connected to db as HOST:PORT, from SHOW
// REPLICAS / SHOW SLAVE HOSTS. A replica that does not report its host
// (report_host unset) gets the host its binlog dump thread connects from,
// when all of them come from one host; one whose address cannot be told
// is an error that names it, never skipped. Entries with a server_id in
// shardctl's binlog-tail range are its own tails, not servers.
//
// A binlog reader that never registered (mysqlbinlog, a replica of a
// version or tool that skips registration) is in no list, only in the
// processlist as a binlog dump thread: more dump threads than registered
// entries is an error naming them, since their port cannot be told from
// the source.
func Discover(ctx context.Context, db *sql.DB, self string) ([]string, error) {
	f, err := dbutil.FlavorOf(ctx, db)
	if err != nil {
		return nil, err
	}
	q := f.ReplicaHostsSQL()
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", q, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	type entry struct{ id, host, port string }
	var found []entry
	for rows.Next() {
		vals, ptrs := dbutil.Dest[sql.NullString](len(cols))
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		get := func(name string) string {
			if i := dbutil.ReplicaColumn(cols, name); i >= 0 {
				return vals[i].String
			}
			return ""
		}
		found = append(found, entry{get("Server_Id"), get("Host"), get("Port")})
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	dumps, err := dumpThreads(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("%s: read the binlog dump threads (the account needs PROCESS): %w", self, err)
	}
	if len(dumps) > len(found) {
		return nil, fmt.Errorf("%s has %d binlog dump connection(s) (%s) but lists %d replica(s) in %s: a replica or binlog reader (mysqlbinlog) that did not register, whose port cannot be told from here; name the replicas with --replica HOST:PORT instead of auto",
			self, len(dumps), joinDumps(dumps), len(found), q)
	}
	var out []string
	dumpHost := ""
	for _, e := range found {
		if id, _ := strconv.ParseInt(e.id, 10, 64); id >= dbutil.TailServerIDMin && id < dbutil.TailServerIDMin+dbutil.TailServerIDSpan {
			continue
		}
		host := e.host
		if host == "" {
			if dumpHost == "" {
				if dumpHost, err = dumpThreadHost(ctx, db); err != nil {
					return nil, fmt.Errorf("replica server_id %s of %s reports no host (set report_host on it, or name it with --replica HOST:PORT): %w", e.id, self, err)
				}
			}
			host = dumpHost
		}
		port, _ := strconv.Atoi(e.port)
		if port == 0 {
			return nil, fmt.Errorf("replica server_id %s of %s reports no port: set report_port on it, or name it with --replica HOST:PORT", e.id, self)
		}
		out = append(out, net.JoinHostPort(host, strconv.Itoa(port)))
	}
	return out, nil
}

// dumpThread is a binlog dump connection: its thread id and the client's HOST:PORT.
type dumpThread struct{ id, from string }

func (d dumpThread) String() string { return "thread " + d.id + " from " + d.from }

// dumpThreads lists the server's binlog dump connections.
func dumpThreads(ctx context.Context, db *sql.DB) ([]dumpThread, error) {
	rows, err := db.QueryContext(ctx, "SELECT ID, HOST FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%' ORDER BY ID")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []dumpThread
	for rows.Next() {
		var d dumpThread
		if err := rows.Scan(&d.id, &d.from); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

func joinDumps(ds []dumpThread) string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.String()
	}
	return strings.Join(out, ", ")
}

// dumpThreadHost is the one host the server's binlog dump threads connect from.
func dumpThreadHost(ctx context.Context, db *sql.DB) (string, error) {
	dumps, err := dumpThreads(ctx, db)
	if err != nil {
		return "", err
	}
	hosts := map[string]bool{}
	for _, d := range dumps {
		h := d.from
		if i := strings.LastIndexByte(h, ':'); i > 0 {
			h = h[:i]
		}
		hosts[h] = true
	}
	if len(hosts) != 1 {
		return "", fmt.Errorf("its binlog dump threads come from %d hosts", len(hosts))
	}
	for h := range hosts {
		return h, nil
	}
	return "", nil
}

// watchList is the replicas cfg watches: those named, and with Discover
// those the source and the target list.
func (cfg Config) watchList(ctx context.Context, src *sql.DB) ([]string, error) {
	if !cfg.Discover {
		return cfg.Replicas, nil
	}
	out := append([]string(nil), cfg.Replicas...)
	for _, s := range cfg.sides(src) {
		found, err := Discover(ctx, s.db, "the "+s.name)
		if err != nil {
			return nil, fmt.Errorf("--replica auto: %w", err)
		}
		for _, r := range found {
			if !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--replica auto: neither the source nor the target lists a replica (SHOW REPLICAS / SHOW SLAVE HOSTS): drop --max-lag, or name replicas with --replica HOST:PORT")
	}
	return out, nil
}

// side is the source or the target server, as Config sees them.
type side struct {
	db   *sql.DB
	name string // source or target
}

// sides are src and cfg.Target, those that are set.
func (cfg Config) sides(src *sql.DB) []side {
	var out []side
	for _, s := range []side{{src, "source"}, {cfg.Target, "target"}} {
		if s.db != nil {
			out = append(out, s)
		}
	}
	return out
}
