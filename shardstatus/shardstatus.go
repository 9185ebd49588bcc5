// Package shardstatus reads what 'shardctl status' shows of each shard: its
// mappings' state, and row and size figures from its server (counted, read
// from the tablespace files, or taken from table statistics).
package shardstatus

import (
	"context"
	"database/sql"
	"strings"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/shardmap"
)

// What a figure in 'status' is: counted, read from the files, or taken
// from table statistics (which can be far off right after a load).
const (
	Exact      = "exact"
	Tablespace = "tablespace"
	Estimate   = "estimate"
)

// Shard is one shard as 'shardctl status' shows it.
type Shard struct {
	ShardID   int                `json:"shard_id"`
	Server    string             `json:"server"`
	Schema    string             `json:"schema"`
	Mappings  []shardmap.Mapping `json:"mappings"`
	Status    string             `json:"status"`    // online, offline, partial (some mappings offline), unmapped
	Rows      int64              `json:"rows"`      // rows of the sharded tables (exact with --exact, else estimates)
	RowsKind  string             `json:"rows_kind"` // exact (COUNT(*)) or estimate (table statistics)
	Bytes     int64              `json:"bytes"`     // size of the whole schema
	SizeKind  string             `json:"size_kind"` // tablespace (InnoDB file sizes, current) or estimate (table statistics)
	Reachable bool               `json:"reachable"`
	Error     string             `json:"error,omitempty"`
}

// Read reads shard l's figures from its server (with exact: COUNT(*) of
// each sharded table). A server it cannot reach is reported, not an error.
func Read(ctx context.Context, m *shardmap.Map, l shardmap.Location, creds dbutil.Creds, exact bool) Shard {
	st := Shard{ShardID: l.ShardID, Server: l.Addr().String(), Schema: l.Schema, Mappings: m.ShardMappings(l.ShardID)}
	st.Status = "unmapped"
	for i, mp := range st.Mappings {
		switch {
		case i == 0:
			st.Status = mp.Status
		case st.Status != mp.Status:
			st.Status = "partial"
		}
	}
	db, err := dbutil.Open(ctx, l.Addr(), creds, "")
	if err != nil {
		st.Error = "unreachable"
		return st
	}
	defer db.Close()
	st.Reachable = true
	sharded := map[string]bool{}
	for _, c := range m.Columns {
		sharded[c.Table] = true
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		st.Error = err.Error()
		return st
	}
	defer conn.Close()
	freshStatistics(ctx, conn)
	rows, err := conn.QueryContext(ctx, "SELECT TABLE_NAME, COALESCE(TABLE_ROWS,0), COALESCE(DATA_LENGTH,0)+COALESCE(INDEX_LENGTH,0) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_TYPE = 'BASE TABLE' AND TABLE_NAME <> ?", l.Schema, dbutil.FenceTable)
	if err != nil {
		st.Error = err.Error()
		return st
	}
	var tables []string
	all := 0
	for rows.Next() {
		var name string
		var n, b int64
		if rows.Scan(&name, &n, &b) == nil {
			all++
			st.Bytes += b
			if sharded[name] {
				st.Rows += n
				tables = append(tables, name)
			}
		}
	}
	rows.Close()
	st.RowsKind, st.SizeKind = Estimate, Estimate
	if b, ok := tablespaceBytes(ctx, conn, l.Schema, all); ok {
		st.Bytes, st.SizeKind = b, Tablespace
	}
	if exact {
		st.RowsKind = Exact
		st.Rows = 0
		for _, t := range tables {
			var n int64
			if err := conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+dbutil.Table(l.Schema, t)).Scan(&n); err != nil {
				st.Error = err.Error()
				continue
			}
			st.Rows += n
		}
	}
	return st
}

// freshStatistics asks MySQL 8 not to serve cached statistics on this
// connection (it caches them for a day by default). MariaDB has no such
// cache and refuses the variable: the error is of no interest.
func freshStatistics(ctx context.Context, conn *sql.Conn) {
	_, _ = conn.ExecContext(ctx, "SET SESSION information_schema_stats_expiry = 0")
}

// tablespaceBytes is the allocated size of schema's InnoDB tablespace files
// (file-per-table): current, unlike the statistics, and cheap to read. ok is
// false where the server does not say (no such view, no privilege) or where
// fewer files than the schema's tables exist (some live in a shared tablespace).
func tablespaceBytes(ctx context.Context, conn *sql.Conn, schema string, tables int) (int64, bool) {
	pattern := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(schema) + "/%"
	for _, view := range []string{"INNODB_TABLESPACES", "INNODB_SYS_TABLESPACES"} { // MySQL 8, MariaDB
		var n int64
		var b sql.NullInt64
		err := conn.QueryRowContext(ctx, "SELECT COUNT(*), SUM(ALLOCATED_SIZE) FROM information_schema."+view+" WHERE NAME LIKE ?", pattern).Scan(&n, &b)
		if err == nil && n > 0 && n >= int64(tables) && b.Valid {
			return b.Int64, true
		}
	}
	return 0, false
}
