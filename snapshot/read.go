package snapshot

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/shardctl/shardctl/chunk"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/tables"
	"github.com/shardctl/shardctl/watermark"
)

func selectList(cols []chunk.Column) string {
	e := make([]string, len(cols))
	for i, c := range cols {
		e[i] = c.Expr()
	}
	return strings.Join(e, ", ")
}

// reader reads a table's chunks from the source in key order.
type reader struct {
	c         *Copier
	t         tables.Table
	conn      *sql.Conn
	cols      []chunk.Column // read; the first `written` are written
	written   int
	key       chunk.Key
	keyPos    []int
	budget    int64 // bytes of values per chunk
	load      bool  // encode rows as LOAD DATA text instead of arguments
	limit     int   // rows asked for by the next read
	query     string
	where     string
	whereArgs []any
	watch     *watch // Copier.WatchDDL: the table's definition, checked after each read
}

// run reads the chunks of key range (after, hi] (hi nil: no end) and
// returns how many it sent.
func (r *reader) run(ctx context.Context, part int, after, hi []string, ch chan<- batch) (int, error) {
	full := r.c.chunkRows()
	for seq := 0; ; seq++ {
		if err := ctx.Err(); err != nil {
			return seq, nil // the canceller reports why
		}
		if r.c.Throttle != nil {
			if err := r.c.Throttle(ctx); err != nil {
				return seq, fmt.Errorf("throttle: %w", err)
			}
		}
		began := time.Now()
		b, cut, err := r.read(ctx, after, hi)
		if r.watch != nil {
			err = r.watch.check(ctx, r.conn, err) // before the chunk reaches a writer
		}
		if err != nil {
			putBuf(b.data)
			return seq, err
		}
		took := time.Since(began)
		if b.rows == 0 {
			putBuf(b.data)
			return seq, nil
		}
		b.part, b.seq = part, seq
		select {
		case ch <- b:
		case <-ctx.Done():
			return seq, nil
		}
		after = b.last
		switch {
		case cut: // rows are big: ask for no more than fitted this time
			r.limit = b.rows
		case b.rows < r.limit:
			return seq + 1, nil // the range is exhausted; later rows are the binlog tail's
		case r.c.ChunkTime > 0 && took > r.c.ChunkTime: // a loaded source: smaller chunks, shorter reads
			r.limit = max(100, int(float64(r.limit)*float64(r.c.ChunkTime)/float64(took)))
		default:
			r.limit = min(full, r.limit*2)
		}
	}
}

// read reads one chunk after `after`, up to hi (nil: no end). cut reports
// that it stopped early because the chunk reached its byte budget.
func (r *reader) read(ctx context.Context, after, hi []string) (b batch, cut bool, err error) {
	rng, args, err := r.key.Range(after, hi)
	if err != nil {
		return b, false, err
	}
	q := r.query + rng + " AND " + r.where + " ORDER BY " + r.key.OrderBy() + " LIMIT ?"
	args = append(append(args, r.whereArgs...), r.limit)
	rows, err := r.conn.QueryContext(ctx, q, args...)
	if err != nil {
		return b, false, fmt.Errorf("after key %q: %w", after, err)
	}
	defer rows.Close()
	raw, dest := dbutil.Dest[sql.RawBytes](len(r.cols))
	lastKey := make([][]byte, len(r.keyPos))
	var buf []byte
	if r.load {
		b.data = getBuf()
		buf = *b.data
		defer func() { *b.data = buf }()
	} else {
		b.args = make([]any, 0, r.limit*r.written)
	}
	var size int64
	var mem arena
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return b, false, err
		}
		for i, v := range raw[:r.written] {
			if len(v) == 1 && v[0] == '0' && r.cols[i].Type == "YEAR" {
				// The driver reads YEAR's text "0000" as the number 0, which
				// comes back as "0"; as text, a YEAR of '0' is 2000.
				v = year0000
			}
			switch {
			case r.load:
				if i > 0 {
					buf = append(buf, '\t')
				}
				buf = appendField(buf, v)
			case v == nil:
				b.args = append(b.args, nil)
			case r.cols[i].Kind == chunk.Bit:
				// BIT as a number: MySQL refuses its raw bytes as a string
				// parameter (error 3988, they are not valid text).
				var n uint64
				for _, c := range v {
					n = n<<8 | uint64(c)
				}
				b.args = append(b.args, n)
			default:
				b.args = append(b.args, mem.copy(v))
			}
			size += int64(len(v)) + valueOverhead
		}
		if r.load {
			buf = append(buf, '\n')
		}
		for i, p := range r.keyPos {
			lastKey[i] = append(lastKey[i][:0], raw[p]...)
		}
		b.rows++
		if size >= r.budget && b.rows < r.limit {
			cut = true
			break
		}
	}
	if err := rows.Err(); err != nil {
		return b, false, fmt.Errorf("after key %q: %w", after, err)
	}
	b.bytes = size
	if b.rows > 0 {
		b.last = r.key.Text(lastKey)
	}
	return b, cut, nil
}

var year0000 = []byte("0000")

// arena copies a chunk's values into a few large blocks instead of one
// allocation per value. Values are written as []byte through prepared
// statements, which send them as strings in the connection's character set:
// the server converts them to each column's charset (an interpolated
// _binary literal would not be converted, and a latin1 column would store
// the UTF-8 bytes).
type arena struct{ buf []byte }

const arenaBlock = 64 << 10

// copy returns a copy of raw; an empty value stays non-nil (nil is NULL).
func (a *arena) copy(raw []byte) []byte {
	if a.buf == nil || len(raw) > cap(a.buf)-len(a.buf) {
		a.buf = make([]byte, 0, max(arenaBlock, len(raw)))
	}
	off := len(a.buf)
	a.buf = append(a.buf, raw...)
	return a.buf[off:len(a.buf):len(a.buf)]
}

// split returns the inner bounds of the key ranges a large table's readers
// take: none (one reader) unless more than SplitRows rows are left. Each
// bound is found by walking the primary key, so ranges hold about as many
// rows each whatever the keys look like.
func (c *Copier) split(ctx context.Context, q dbutil.Querier, t tables.Table, key chunk.Key, where string, whereArgs []any, from watermark.Mark) ([][]string, error) {
	readers := c.Readers
	if readers == 0 {
		readers = defaultReaders
	}
	splitRows := c.SplitRows
	if splitRows <= 0 {
		splitRows = defaultSplitRows
	}
	left := t.EstRows - from.Rows
	if readers < 2 || left <= splitRows {
		return nil, nil
	}
	step := int(left / int64(readers))
	var bounds [][]string
	after := from.After
	for range readers - 1 {
		b, ok, err := chunk.Upper(ctx, q, key, after, where, whereArgs, step)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		bounds = append(bounds, b)
		after = b
	}
	return bounds, nil
}
