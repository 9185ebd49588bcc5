package cmd

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// What a figure in 'status' is: counted, read from the files, or taken
// from table statistics (which can be far off right after a load).
const (
	kindExact      = "exact"
	kindTablespace = "tablespace"
	kindEstimate   = "estimate"
)

// estMark prefixes figures from statistics, in status and in dry runs.
const estMark = "~"

// statusFigures renders a shard's ROWS and SIZE, marking estimates.
func statusFigures(sh ShardStatus) (rows, size string) {
	rows = fmt.Sprint(sh.Rows)
	if sh.RowsKind != kindExact {
		rows = estMark + rows
	}
	size = fmt.Sprintf("%.1f MiB", float64(sh.Bytes)/(1<<20))
	if sh.SizeKind == kindEstimate {
		size = estMark + size
	}
	return rows, size
}

// estimateNote explains the mark when a figure carries it.
func estimateNote(shards []ShardStatus) string {
	var rows, size, files bool
	for _, sh := range shards {
		if !sh.Reachable {
			continue
		}
		rows = rows || sh.RowsKind != kindExact
		size = size || sh.SizeKind == kindEstimate
		files = files || sh.SizeKind == kindTablespace
	}
	note := ""
	if files {
		// Files do not shrink when rows are deleted: say what the figure is.
		note = "SIZE is the InnoDB files on disk (space freed by deleted rows included)\n"
	}
	switch {
	case rows && size:
		return note + estMark + " estimate from table statistics (can be far off right after a load); --exact counts rows"
	case rows:
		return note + estMark + " estimate from table statistics (can be far off right after a load); --exact counts rows"
	case size:
		return note + estMark + " size estimate from table statistics"
	}
	return strings.TrimSuffix(note, "\n")
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
