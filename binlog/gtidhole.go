package binlog

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// MySQL's binary log status (SHOW BINARY LOG STATUS, MasterStatus) reads
// gtid_executed, then the binlog's write position: a group of transactions
// written to the binlog but not yet committed lies before the position and
// outside the set (measured on MySQL 9.7 under 8 writers: one status in five,
// up to 8 GTIDs). A tail that starts at the position never reads those
// transactions, so their GTIDs were a hole in every checkpoint after it, and a
// resume by GTID on a promoted replica was sent them again: old row images
// applied over newer rows, which no later event corrects.
//
// So a MySQL tail starts from the start's GTID set (the server sends every
// transaction outside it) and keeps the position's meaning: a transaction the
// server sends from before the start position (Tailer.fromSet) is already in
// the copy, or was applied by an earlier run; its GTID joins the set, its rows
// are not applied, and its statements are not checked as schema changes.

// startsFromSet reports whether a MySQL tail may start from the GTID set
// set: the server runs with GTIDs on and still has every transaction
// outside the set (what it purged is within it). Otherwise the tail starts
// at the position, as a server without GTIDs needs.
func startsFromSet(ctx context.Context, db *sql.DB, set string) (bool, error) {
	var mode, purged string
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_mode, @@GLOBAL.gtid_purged").Scan(&mode, &purged); err != nil {
		return false, fmt.Errorf("read gtid_mode and gtid_purged: %w", err)
	}
	if !strings.EqualFold(mode, "ON") {
		return false, nil
	}
	return GTIDContains(mysql.MySQLFlavor, set, strings.ReplaceAll(purged, "\n", ""))
}

// beforeStart reports whether the event group whose GTID event ends at
// header's position lies before the start position (fromSet): a start
// position is a group boundary, so a group that begins before it ends at
// or before it.
func (h *handler) beforeStart(header *replication.EventHeader) bool {
	if h.before.IsZero() || header == nil || h.file == "" {
		return false
	}
	return Position{File: h.file, Pos: header.LogPos}.Compare(h.before) < 0
}
