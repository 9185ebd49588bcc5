package snapshot

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"

	"github.com/shardctl/shardctl/chunk"
	"github.com/shardctl/shardctl/dbutil"
)

// Chunks go to the target through LOAD DATA LOCAL INFILE when the target
// allows it: the server parses tab-separated text far more cheaply than the
// literals of a multi-row INSERT (measured: about a third of the target's
// CPU per row, and a third of ours, since rows are escaped straight from the
// read buffer into one reused byte buffer). The multi-row INSERT stays as the
// fallback for a target with local_infile=OFF and for tables with column
// types whose text form LOAD DATA cannot take back (GEOMETRY and the like).

// loadable reports whether every written column round-trips through LOAD
// DATA's text form exactly: BIT and binary strings go as their raw bytes,
// which MariaDB stores as they are. MySQL checks the whole line against the
// file's character set (error 1300 on bytes that are not utf8mb4), so there a
// table with BIT or binary columns is copied with INSERT.
func loadable(cols []chunk.Column, mysql bool) bool {
	for _, c := range cols {
		switch {
		case c.Kind == chunk.Other:
			return false
		case mysql && (c.Kind == chunk.Binary || c.Kind == chunk.Bit):
			return false
		}
	}
	return true
}

// localInfile reports whether the target accepts LOAD DATA LOCAL. The
// driver always offers the capability; the server's switch decides.
func localInfile(ctx context.Context, db *sql.DB) (bool, error) {
	var on sql.NullInt64
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.local_infile").Scan(&on); err != nil {
		return false, err
	}
	return on.Valid && on.Int64 != 0, nil
}

// refusedLocal reports whether err is the server refusing LOAD DATA LOCAL
// (1148 on older servers, 4166 on MariaDB, 3948 on MySQL 8+).
func refusedLocal(err error) bool {
	switch dbutil.ErrNumber(err) {
	case 1148, 3948, 4166:
		return true
	}
	return false
}

// appendField appends v to dst as one field of LOAD DATA's default format
// (FIELDS TERMINATED BY '\t' ESCAPED BY '\\' LINES TERMINATED BY '\n'):
// NULL is \N; backslash, tab, newline, carriage return and NUL are escaped;
// every other byte, binary or not, goes as it is. A table lookup per byte,
// not a switch: this loop sees every byte the copy reads.
func appendField(dst, v []byte) []byte {
	if v == nil {
		return append(dst, '\\', 'N')
	}
	start := 0
	for i, c := range v {
		e := fieldEscape[c]
		if e == 0 {
			continue
		}
		dst = append(dst, v[start:i]...)
		dst = append(dst, '\\', e)
		start = i + 1
	}
	return append(dst, v[start:]...)
}

// fieldEscape maps a byte appendField escapes to the letter after its
// backslash, and every other byte to 0.
var fieldEscape = [256]byte{'\\': '\\', '\t': 't', '\n': 'n', '\r': 'r', 0: '0'}

// loadText is the LOAD DATA statement for reader name; replace makes rows
// already on the target give way to the chunk's; charset is the text's
// character set (loadCharset).
func (c *Copier) loadText(table string, cols []chunk.Column, charset, name string, replace bool) string {
	names := make([]string, len(cols))
	for i, col := range cols {
		names[i] = col.Name
	}
	mode := "IGNORE"
	if replace {
		mode = "REPLACE"
	}
	return "LOAD DATA LOCAL INFILE 'Reader::" + name + "' " + mode + " INTO TABLE " + dbutil.Table(c.TargetSchema, table) +
		" CHARACTER SET " + charset + " FIELDS TERMINATED BY '\\t' ESCAPED BY '\\\\' LINES TERMINATED BY '\\n' (" + dbutil.QuoteIdents(names) + ")"
}

// loadCharset is the character set LOAD DATA reads a table's text in. Rows
// are read over utf8mb4 connections, so text arrives as utf8mb4; when every
// character column of the target table is utf8mb4 too, "binary" stores the
// bytes as they are, which is the same result without the server checking
// every character again (measured: about 9% of the target's CPU for a
// sysbench table). Only plain string columns take binary input that way:
// any other charset needs the conversion, ENUM and SET match their values
// only in the column's charset (a 4-byte value came out empty), and MySQL's
// JSON refuses binary strings (error 3144), and MariaDB's UUID, INET6 and
// INET4 take a binary string as their 16- or 4-byte binary form: their text
// in binary came out NULL, every row, under IGNORE without an error (seen
// on 10.11 and 11.8, TestSchemasMariaDB118).
func loadCharset(ctx context.Context, db *sql.DB, schema, table string) (string, error) {
	var other int
	err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND (DATA_TYPE IN ('json', 'uuid', 'inet6', 'inet4') OR CHARACTER_SET_NAME IS NOT NULL AND
		(CHARACTER_SET_NAME <> 'utf8mb4' OR DATA_TYPE NOT IN ('char', 'varchar', 'tinytext', 'text', 'mediumtext', 'longtext')))`,
		schema, table).Scan(&other)
	if err != nil {
		return "", err
	}
	if other > 0 {
		return "utf8mb4", nil
	}
	return "binary", nil
}

var readerSeq atomic.Int64

// loadChunks writes chunks with one LOAD DATA LOCAL statement. LOAD DATA
// LOCAL cannot stop mid-stream, so a duplicate key skips the row instead of
// failing: a short count means the target already held some of the chunks'
// rows (after a resume), and the chunks are loaded again with REPLACE so
// those rows take the source's values, as the upsert does.
func loadChunks(ctx context.Context, conn *sql.Conn, text func(name string, replace bool) string, bs []batch) error {
	name := "shardctl-" + strconv.FormatInt(readerSeq.Add(1), 10)
	rows := 0
	for _, b := range bs {
		rows += b.rows
	}
	mysql.RegisterReaderHandler(name, func() io.Reader {
		rs := make([]io.Reader, len(bs))
		for i, b := range bs {
			rs[i] = bytes.NewReader(*b.data)
		}
		return io.MultiReader(rs...)
	})
	defer mysql.DeregisterReaderHandler(name)
	res, err := conn.ExecContext(ctx, text(name, false))
	if refusedLocal(err) {
		return fmt.Errorf("the target refused LOAD DATA LOCAL (local_infile switched off during the copy?); a resume copies with INSERT: %w", err)
	}
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == int64(rows) {
		return nil
	}
	if _, err := conn.ExecContext(ctx, text(name, true)); err != nil {
		return fmt.Errorf("reload with REPLACE after %d of %d rows went in: %w", n, rows, err)
	}
	return nil
}

// gather adds to bs the chunks already waiting in ch, up to max chunks in
// all, without waiting for more. ok is false once ch is closed.
func gather(ch <-chan batch, bs []batch, most int) (_ []batch, ok bool) {
	for len(bs) < most {
		select {
		case b, open := <-ch:
			if !open {
				return bs, false
			}
			bs = append(bs, b)
		default:
			return bs, true
		}
	}
	return bs, true
}

// bufPool recycles chunk buffers between the reader and the writers.
var bufPool = sync.Pool{New: func() any { return new([]byte) }}

func getBuf() *[]byte {
	p := bufPool.Get().(*[]byte)
	*p = (*p)[:0]
	return p
}

func putBuf(p *[]byte) {
	if p != nil && cap(*p) <= 16<<20 {
		bufPool.Put(p)
	}
}
