package fkcheck

import (
	"context"
	"database/sql"
	"math"
	"strconv"
	"sync"

	"github.com/shardctl/shardctl/chunk"
	"github.com/shardctl/shardctl/dbutil"
)

// valueWalk hands out a chunk's bounds without reading the child: when its
// primary key is one integer column, a chunk is a range of key values,
// sized from the density of the chunks read so far (the key walk's
// LIMIT 1 OFFSET reads every row to find a bound: a quarter of the server's
// CPU once chunks are matched by key range). The first chunk is open below
// and the last open above, so rows written meanwhile outside the bounds
// read at the start are read too.
type valueWalk struct {
	mu        sync.Mutex
	min, max  int64 // the key's bounds at the start
	width     int64 // the next chunk's, in key values
	rows, per int64 // the last chunk read: rows in per key values (per < 0: a bounded chunk)
	settled   int64 // the width of the last chunk read that held a quarter of keyCheckChunk rows or more
	ceiling   int64 // a key up to which the key walk found at most 2 chunks' rows (0: none)
}

// newValueWalk returns nil (the key walk serves) unless the key is one
// integer column that fits an int64 and the table has rows.
func newValueWalk(ctx context.Context, db *sql.DB, key chunk.Key) (*valueWalk, error) {
	if len(key.Cols) != 1 {
		return nil, nil
	}
	c := key.Cols[0]
	if !fitsInt64(c) {
		return nil, nil
	}
	var lo, hi sql.NullInt64
	col := dbutil.QuoteIdent(c.Name)
	if err := db.QueryRowContext(ctx, "SELECT MIN("+col+"), MAX("+col+") FROM "+dbutil.Table(key.Schema, key.Table)).Scan(&lo, &hi); err != nil {
		return nil, err
	}
	if !lo.Valid || !hi.Valid || lo.Int64 == math.MinInt64 {
		return nil, nil
	}
	return newValueWalkOf(lo.Int64, hi.Int64), nil
}

func newValueWalkOf(lo, hi int64) *valueWalk {
	return &valueWalk{min: lo, max: hi, width: keyCheckChunk, settled: keyCheckChunk}
}

// read records that a chunk of width key values held rows rows (width < 0:
// a chunk the key walk bounded after a gap, whose width says nothing of
// the keys' density beyond it).
func (w *valueWalk) read(width, rows int64) {
	if w == nil || width == 0 {
		return
	}
	w.mu.Lock()
	w.rows, w.per = rows, width
	if rows >= keyCheckChunk/4 && width > 0 {
		w.settled = width
	}
	w.mu.Unlock()
}

// chunk returns the upper bound of the chunk after after (nil: the first
// chunk), whether one follows it (false: this one is open above), and the
// width to record for it. Across a gap in the keys the width grows fast:
// walk (the key walk: the upper bound n rows after after) then bounds the
// chunk to 2 chunks' rows, so a dense run after the gap is not read, or
// joined, as one chunk; when fewer rows are left, the chunk is the last.
func (w *valueWalk) chunk(after []string, walk func(n int) ([]string, bool, error)) ([]string, bool, int64, error) {
	upper, more, width := w.next(after)
	if w.leaping(upper) {
		walked, full, err := walk(2 * keyCheckChunk)
		if err != nil {
			return nil, false, 0, err
		}
		if !full {
			return nil, false, 0, nil // under 2 chunks' rows left: the last chunk
		}
		upper, width = w.bound(after, upper, walked)
		more = true
	}
	return upper, more, width, nil
}

// next returns the upper bound of the chunk after after (nil: the first
// chunk), whether one follows it (false: this one is open above), and the
// key values it spans. The width moves toward keyCheckChunk rows by the
// last chunk read, by at most 4x a step; after a bounded chunk it starts
// over from keyCheckChunk.
func (w *valueWalk) next(after []string) (upper []string, more bool, width int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.per < 0:
		w.width, w.settled = keyCheckChunk, keyCheckChunk
	case w.per > 0:
		up := w.width * 4 // saturating: keys may span the whole int64 range
		if w.width > math.MaxInt64/4 {
			up = math.MaxInt64
		}
		want := up
		if w.rows > 0 {
			want = int64(min(float64(w.per)*keyCheckChunk/float64(w.rows), float64(up)))
		}
		w.width = max(1, min(want, up), w.width/4)
	}
	w.per = 0
	lo := w.lower(after)
	if lo >= w.max || uint64(w.max)-uint64(lo) <= uint64(w.width) {
		return nil, false, 0
	}
	return []string{strconv.FormatInt(lo+w.width, 10)}, true, w.width
}

// lower is the exclusive lower bound of the chunk after after.
func (w *valueWalk) lower(after []string) int64 {
	if after == nil {
		return w.min - 1 // the first chunk is open below
	}
	lo, _ := strconv.ParseInt(after[0], 10, 64)
	return lo
}

// leaping reports whether the chunk up to upper (nil: open above) needs the
// key walk's bound: it is more than 4 times as wide as the last chunk that
// held rows enough, and reaches past the last bound the key walk found.
func (w *valueWalk) leaping(upper []string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.width/4 <= w.settled {
		return false
	}
	if upper == nil || w.ceiling == 0 {
		return true
	}
	hi, _ := strconv.ParseInt(upper[0], 10, 64)
	return hi > w.ceiling
}

// bound returns the nearer of upper (nil: open above) and walked (where the
// key walk found 2 chunks' rows after after) and the width to record for
// the chunk: -1 when walked bounds it.
func (w *valueWalk) bound(after, upper, walked []string) ([]string, int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	b, err := strconv.ParseInt(walked[0], 10, 64)
	if err != nil {
		return upper, 0
	}
	if upper != nil {
		if a, _ := strconv.ParseInt(upper[0], 10, 64); b >= a {
			w.ceiling = b
			return upper, a - w.lower(after)
		}
	}
	w.ceiling = 0
	return walked, -1
}
