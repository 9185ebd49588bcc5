// Package binlog is the binlog tail of an online shard move: it reads the
// source server's binary log with go-mysql canal and applies the row changes
// of the listed tables of one source schema to a target schema, idempotently,
// so that replaying from an older position converges to the same state.
package binlog

import (
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/shardctl/shardctl/dbutil"
)

// Position is a binlog coordinate: the file and the offset just after an event.
type Position struct {
	File string `json:"file"`
	Pos  uint32 `json:"pos"`
	// GTID is the server's GTID set at this point (MySQL gtid_executed,
	// MariaDB's GTID per domain), empty where unknown; Server names the
	// server that wrote File (dbutil.Flavor.ServerIdentitySQL). On another
	// server (a promoted replica) a tail resumes from GTID, not File:Pos.
	GTID   string `json:"gtid,omitempty"`
	Server string `json:"server,omitempty"`
}

// IsZero reports whether p is the empty position.
func (p Position) IsZero() bool { return p.File == "" && p.Pos == 0 }

// String renders "file:pos".
func (p Position) String() string {
	if p.IsZero() {
		return "(none)"
	}
	return p.File + ":" + strconv.FormatUint(uint64(p.Pos), 10)
}

// ParsePosition parses "file:pos" as String renders it.
func ParsePosition(s string) (Position, error) {
	s = strings.TrimSpace(s)
	i := strings.LastIndexByte(s, ':')
	if i <= 0 || i == len(s)-1 {
		return Position{}, fmt.Errorf("binlog position %q: want FILE:OFFSET, for example mariadb-bin.000003:1234", s)
	}
	n, err := strconv.ParseUint(s[i+1:], 10, 32)
	if err != nil {
		return Position{}, fmt.Errorf("binlog position %q: offset is not a number", s)
	}
	return Position{File: s[:i], Pos: uint32(n)}, nil
}

// fileSeq returns the numeric suffix of a binlog file name ("x.000010" -> 10).
func fileSeq(file string) (uint64, bool) {
	i := strings.LastIndexByte(file, '.')
	if i < 0 || i == len(file)-1 {
		return 0, false
	}
	n, err := strconv.ParseUint(file[i+1:], 10, 64)
	return n, err == nil
}

// Compare orders positions by the binlog file's sequence number, then by
// offset: -1, 0 or 1. The file sequence is compared numerically because the
// suffix may outgrow its zero padding (x.999999 < x.1000000). The zero
// position sorts before every other.
func (p Position) Compare(q Position) int {
	if p.File != q.File {
		if p.File == "" {
			return -1
		}
		if q.File == "" {
			return 1
		}
		ps, okp := fileSeq(p.File)
		qs, okq := fileSeq(q.File)
		switch {
		case okp && okq && ps < qs:
			return -1
		case okp && okq && ps > qs:
			return 1
		case !okp || !okq:
			return strings.Compare(p.File, q.File)
		}
		// Same sequence under different base names: order by name for a stable answer.
		if c := strings.Compare(p.File, q.File); c != 0 {
			return c
		}
	}
	switch {
	case p.Pos < q.Pos:
		return -1
	case p.Pos > q.Pos:
		return 1
	}
	return 0
}

// ErrNoGTID is returned when a tail must continue on another server (a
// promoted replica) but its start position carries no GTID set.
var ErrNoGTID = errors.New("the checkpoint was written on another server and carries no GTID set, so it cannot be found on this one: resume on the original source, or abort the plan and start again (GTIDs need gtid_mode=ON on MySQL)")

// ErrBinlogOff is returned when the server does not write a binary log.
var ErrBinlogOff = errors.New("binary logging is off on the server (an online move needs log_bin with binlog_format=ROW and binlog_row_image=FULL)")

// MasterStatus returns the server's current binlog position (the end of the
// last complete event group).
func MasterStatus(ctx context.Context, db *sql.DB) (Position, error) {
	f, err := dbutil.FlavorOf(ctx, db)
	if err != nil {
		return Position{}, err
	}
	rows, err := db.QueryContext(ctx, f.BinlogStatusSQL())
	if err != nil {
		return Position{}, fmt.Errorf("read the binlog position (%s; the account needs BINLOG MONITOR / REPLICATION CLIENT): %w", f.BinlogStatusSQL(), err)
	}
	defer rows.Close()
	vals, err := firstRow(rows)
	if err != nil {
		return Position{}, fmt.Errorf("read the binlog position: %w", err)
	}
	if len(vals) < 2 || vals[0] == "" {
		return Position{}, ErrBinlogOff
	}
	n, err := strconv.ParseUint(vals[1], 10, 32)
	if err != nil {
		return Position{}, fmt.Errorf("read the binlog position: offset %q is not a number", vals[1])
	}
	p := Position{File: vals[0], Pos: uint32(n)}
	if f.MySQL && len(vals) >= 5 {
		// The same row carries the GTID set of exactly this position.
		p.GTID = strings.ReplaceAll(vals[4], "\n", "")
	}
	if p.Server, err = ServerIdentity(ctx, db); err != nil {
		return Position{}, err
	}
	return p, nil
}

// WithGTID fills in p's GTID set on MariaDB, whose binlog status lacks it
// (BINLOG_GTID_POS reads the binlog, so only positions a resume starts from
// ask for it); MySQL's MasterStatus has it already.
func WithGTID(ctx context.Context, db *sql.DB, p Position) (Position, error) {
	if p.GTID != "" {
		return p, nil
	}
	f, err := dbutil.FlavorOf(ctx, db)
	if err != nil || f.MySQL {
		return p, err
	}
	var g sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT BINLOG_GTID_POS(?, ?)", p.File, p.Pos).Scan(&g); err != nil {
		return p, fmt.Errorf("read the GTID of %s: %w", p, err)
	}
	p.GTID = g.String
	return p, nil
}

// ServerIdentity names the server (MySQL server_uuid; MariaDB server_id,
// host and port), so a position is never read against another server's files.
func ServerIdentity(ctx context.Context, db *sql.DB) (string, error) {
	f, err := dbutil.FlavorOf(ctx, db)
	if err != nil {
		return "", err
	}
	var id string
	if err := db.QueryRowContext(ctx, f.ServerIdentitySQL()).Scan(&id); err != nil {
		return "", fmt.Errorf("read the server identity: %w", err)
	}
	return id, nil
}

// BinaryLogs lists the binlog files the server still has, oldest first.
func BinaryLogs(ctx context.Context, db *sql.DB) ([]string, error) {
	rows, err := db.QueryContext(ctx, "SHOW BINARY LOGS")
	if err != nil {
		if dbutil.ErrNumber(err) == 1381 { // ER_NO_BINARY_LOGGING
			return nil, ErrBinlogOff
		}
		return nil, fmt.Errorf("list binlog files (SHOW BINARY LOGS): %w", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var files []string
	for rows.Next() {
		vals, ptrs := dbutil.Dest[sql.RawBytes](len(cols))
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		files = append(files, string(vals[0]))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list binlog files: %w", err)
	}
	if len(files) == 0 {
		return nil, ErrBinlogOff
	}
	return files, nil
}

// Purged reports whether p.File is no longer on the server, so a tail cannot
// start there. A position beyond the server's newest file is an error: it was
// recorded on another server.
func Purged(ctx context.Context, db *sql.DB, p Position) (bool, error) {
	if p.IsZero() {
		return false, errors.New("binlog position is empty")
	}
	files, err := BinaryLogs(ctx, db)
	if err != nil {
		return false, err
	}
	for _, f := range files {
		if f == p.File {
			return false, nil
		}
	}
	if last := (Position{File: files[len(files)-1]}); p.Compare(last) > 0 {
		return false, fmt.Errorf("binlog position %s is beyond the server's newest file %s: was it recorded on another server?", p, last.File)
	}
	return true, nil
}

func firstRow(rows *sql.Rows) ([]string, error) {
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	if !rows.Next() {
		return nil, rows.Err()
	}
	vals, ptrs := dbutil.Dest[sql.NullString](len(cols))
	if err := rows.Scan(ptrs...); err != nil {
		return nil, err
	}
	out := make([]string, len(cols))
	for i, v := range vals {
		out[i] = v.String
	}
	return out, rows.Err()
}

// binlogTLS is the binlog reader's TLS: as dbutil's options say, and in
// "preferred" mode TLS exactly when the source's SQL session got it.
func binlogTLS(ctx context.Context, db *sql.DB, host string, o *dbutil.TLSOptions) (*tls.Config, error) {
	if o.TLSMode() != dbutil.TLSPreferred {
		return o.Client(host), nil
	}
	var name, cipher string
	if err := db.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Ssl_cipher'").Scan(&name, &cipher); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, nil
		}
		return nil, fmt.Errorf("read the TLS state: %w", err)
	}
	if cipher == "" {
		return nil, nil
	}
	return o.Client(host), nil
}
