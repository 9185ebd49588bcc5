// Package shardstatus reads what 'shardctl status' shows of each shard: its
// mappings' state, and row and size figures from its server (counted, read
// from the tablespace files, or taken from table statistics).
package shardstatus

import (
	"context"
	"database/sql"
	"strings"
	"sync"

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
	ShardID  int                `json:"shard_id"`
	Server   string             `json:"server"`
	Schema   string             `json:"schema"`
	Mappings []shardmap.Mapping `json:"mappings"`
	Status   string             `json:"status"` // online, offline, partial (some mappings offline), unmapped
	// Dedicated: rebalance moves no key into or out of it (shardmap set-policy).
	Dedicated bool   `json:"dedicated,omitempty"`
	Rows      int64  `json:"rows"`      // rows of the sharded tables (exact with --exact, else estimates)
	RowsKind  string `json:"rows_kind"` // exact (COUNT(*)) or estimate (table statistics)
	Bytes     int64  `json:"bytes"`     // size of the whole schema
	// ShardedBytes is the sharded tables' data and indexes (table
	// statistics): what a split divides, unlike the global tables.
	ShardedBytes int64  `json:"sharded_bytes"`
	SizeKind     string `json:"size_kind"` // tablespace (InnoDB file sizes, current) or estimate (table statistics)
	Reachable    bool   `json:"reachable"`
	Error        string `json:"error,omitempty"`
}

// serversAtOnce bounds how many servers ReadAll reads in parallel, and
// countsAtOnce how many exact counts run at once on one server.
const (
	serversAtOnce = 8
	countsAtOnce  = 4
)

// ReadAll reads the figures of every shard in locs, in locs' order: per
// server, not per shard (one connection, one statistics query and one
// tablespace query for all its shards), several servers at once, so a map of
// a thousand shards costs a few queries per server.
func ReadAll(ctx context.Context, m *shardmap.Map, locs []shardmap.Location, creds dbutil.Creds, exact bool) []Shard {
	out := make([]Shard, len(locs))
	byServer := map[dbutil.Addr][]int{}
	var servers []dbutil.Addr
	for i, l := range locs {
		out[i] = Shard{ShardID: l.ShardID, Server: l.Addr().String(), Schema: l.Schema, Mappings: m.ShardMappings(l.ShardID), Dedicated: m.Dedicated(l.ShardID)}
		out[i].Status = mappingStatus(out[i].Mappings)
		if _, ok := byServer[l.Addr()]; !ok {
			servers = append(servers, l.Addr())
		}
		byServer[l.Addr()] = append(byServer[l.Addr()], i)
	}
	sharded := map[string]bool{}
	for _, c := range m.Columns {
		sharded[c.Table] = true
	}
	sem := make(chan struct{}, serversAtOnce)
	var wg sync.WaitGroup
	for _, addr := range servers {
		wg.Add(1)
		sem <- struct{}{}
		go func(addr dbutil.Addr, idx []int) {
			defer func() { <-sem; wg.Done() }()
			shards := make([]*Shard, len(idx))
			for k, i := range idx {
				shards[k] = &out[i]
			}
			readServer(ctx, addr, shards, sharded, creds, exact)
		}(addr, byServer[addr])
	}
	wg.Wait()
	return out
}

func mappingStatus(ms []shardmap.Mapping) string {
	status := "unmapped"
	for i, mp := range ms {
		switch {
		case i == 0:
			status = mp.Status
		case status != mp.Status:
			status = "partial"
		}
	}
	return status
}

// readServer fills in the figures of the shards that live on one server.
func readServer(ctx context.Context, addr dbutil.Addr, shards []*Shard, sharded map[string]bool, creds dbutil.Creds, exact bool) {
	fail := func(msg string) {
		for _, st := range shards {
			st.Error = msg
		}
	}
	db, err := dbutil.Open(ctx, addr, creds, "")
	if err != nil {
		fail("unreachable")
		return
	}
	defer db.Close()
	for _, st := range shards {
		st.Reachable = true
		st.RowsKind, st.SizeKind = Estimate, Estimate
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		fail(err.Error())
		return
	}
	defer conn.Close()
	freshStatistics(ctx, conn)
	bySchema := map[string][]*Shard{}
	var args []any
	for _, st := range shards {
		if _, ok := bySchema[st.Schema]; !ok {
			args = append(args, st.Schema)
		}
		bySchema[st.Schema] = append(bySchema[st.Schema], st)
	}
	args = append(args, dbutil.FenceTable)
	rows, err := conn.QueryContext(ctx, "SELECT TABLE_SCHEMA, TABLE_NAME, COALESCE(TABLE_ROWS,0), COALESCE(DATA_LENGTH,0)+COALESCE(INDEX_LENGTH,0) FROM information_schema.TABLES WHERE TABLE_SCHEMA IN ("+
		dbutil.Placeholders(len(args)-1)+") AND TABLE_TYPE = 'BASE TABLE' AND TABLE_NAME <> ?", args...)
	if err != nil {
		fail(err.Error())
		return
	}
	tables := map[string][]string{} // schema -> its sharded tables
	all := map[string]int{}         // schema -> its tables
	for rows.Next() {
		var schema, name string
		var n, b int64
		if rows.Scan(&schema, &name, &n, &b) != nil {
			continue
		}
		all[schema]++
		for _, st := range bySchema[schema] {
			st.Bytes += b
			if sharded[name] {
				st.Rows += n
				st.ShardedBytes += b
			}
		}
		if sharded[name] {
			tables[schema] = append(tables[schema], name)
		}
	}
	rows.Close()
	if sizes, ok := tablespaceBytes(ctx, conn); ok {
		for schema, sts := range bySchema {
			if ts := sizes[schema]; ts.files > 0 && ts.files >= all[schema] {
				for _, st := range sts {
					st.Bytes, st.SizeKind = ts.bytes, Tablespace
				}
			}
		}
	}
	if exact {
		countExactly(ctx, db, bySchema, tables)
	}
}

// countExactly counts the sharded tables' rows of every schema, a few
// statements at a time.
func countExactly(ctx context.Context, db *sql.DB, bySchema map[string][]*Shard, tables map[string][]string) {
	var mu sync.Mutex
	sem := make(chan struct{}, countsAtOnce)
	var wg sync.WaitGroup
	for schema, sts := range bySchema {
		for _, st := range sts {
			st.RowsKind, st.Rows = Exact, 0
		}
		for _, t := range tables[schema] {
			wg.Add(1)
			sem <- struct{}{}
			go func(schema, t string, sts []*Shard) {
				defer func() { <-sem; wg.Done() }()
				var n int64
				err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+dbutil.Table(schema, t)).Scan(&n)
				mu.Lock()
				defer mu.Unlock()
				for _, st := range sts {
					if err != nil {
						st.Error = err.Error()
					} else {
						st.Rows += n
					}
				}
			}(schema, t, sts)
		}
	}
	wg.Wait()
}

// freshStatistics asks MySQL 8 not to serve cached statistics on this
// connection (it caches them for a day by default). MariaDB has no such
// cache and refuses the variable: the error is of no interest.
func freshStatistics(ctx context.Context, conn *sql.Conn) {
	_, _ = conn.ExecContext(ctx, "SET SESSION information_schema_stats_expiry = 0")
}

// tablespace is one schema's InnoDB files.
type tablespace struct {
	files int
	bytes int64
}

// tablespaceBytes is the allocated size of each schema's InnoDB tablespace
// files (file-per-table; NAME is schema/table): current, unlike the
// statistics, and cheap to read. ok is false where the server does not say
// (no such view, no privilege). A schema with fewer files than tables keeps
// some in a shared tablespace: its size stays the estimate.
func tablespaceBytes(ctx context.Context, conn *sql.Conn) (map[string]tablespace, bool) {
	for _, view := range []string{"INNODB_TABLESPACES", "INNODB_SYS_TABLESPACES"} { // MySQL 8, MariaDB
		rows, err := conn.QueryContext(ctx, "SELECT NAME, COALESCE(ALLOCATED_SIZE, 0) FROM information_schema."+view+" WHERE NAME LIKE '%/%'")
		if err != nil {
			continue
		}
		out := map[string]tablespace{}
		for rows.Next() {
			var name string
			var b int64
			if rows.Scan(&name, &b) != nil {
				continue
			}
			schema, _, _ := strings.Cut(name, "/")
			ts := out[schema]
			ts.files++
			ts.bytes += b
			out[schema] = ts
		}
		err = rows.Err()
		rows.Close()
		if err == nil {
			return out, true
		}
	}
	return nil, false
}
