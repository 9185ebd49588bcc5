package pipeline

import (
	"context"
	"strconv"
	"strings"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/plans"
)

// dropsWhole reports whether the cleanup drops the source schema without
// deleting its rows first: only where the plan drops that schema anyway (a
// move or merge of a whole shard), by --cleanup, whose auto choice drops
// where the server's DROP TABLE does not stall its other sessions.
// Measured (docs/BENCHMARKS.md, the dropcost row): on MariaDB 10.11 and MySQL
// 9.7 a DROP DATABASE of 1M rows leaves the p99 of other traffic where the
// chunked deletes put it or lower, and takes a fraction of their time.
func (r *runner) dropsWhole(ctx context.Context) (bool, error) {
	if !r.p.DropSourceSchema {
		return false, nil
	}
	switch r.p.Options.Cleanup {
	case plans.CleanupDrop:
		return true, nil
	case plans.CleanupDelete:
		return false, nil
	}
	f, err := dbutil.FlavorOf(ctx, r.src)
	if err != nil {
		return false, err
	}
	return dropIsCheap(f), nil
}

// dropIsCheap: the server versions whose DROP TABLE frees the table's
// buffer pool pages lazily and removes its file after the commit, instead of
// scanning the buffer pool under a global latch while other sessions wait
// (MySQL 8.0.23, MariaDB 10.6); on older servers a DROP of a large table can
// stall the server, so their rows go in chunks first.
func dropIsCheap(f dbutil.Flavor) bool {
	if f.MySQL {
		return f.Major > 8 || f.Major == 8 && (f.Minor > 0 || patchOf(f.Version) >= 23)
	}
	return f.Major > 10 || f.Major == 10 && f.Minor >= 6
}

// patchOf is the third number of a version such as "8.0.23-log" (0 if none).
func patchOf(v string) int {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 3 {
		return 0
	}
	digits := strings.IndexFunc(parts[2], func(c rune) bool { return c < '0' || c > '9' })
	if digits < 0 {
		digits = len(parts[2])
	}
	n, _ := strconv.Atoi(parts[2][:digits])
	return n
}
