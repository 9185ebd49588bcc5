package cmd

import (
	"fmt"
	"strings"

	"github.com/shardctl/shardctl/shardstatus"
)

// What a figure in 'status' is (package shardstatus).
const (
	kindExact      = shardstatus.Exact
	kindTablespace = shardstatus.Tablespace
	kindEstimate   = shardstatus.Estimate
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
