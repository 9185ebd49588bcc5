package verify

// Chunk bounds without the bound query. Finding where a chunk of n rows ends
// (chunk.Upper) walks n index entries on the source, which is the critical
// path: the target only checksums. Where the key is one integer column, the
// next bound is lo + step instead, the step taken from the rows the chunks
// before held. Coverage does not depend on the guess: every chunk starts
// where the one before ended and the last stays open-ended. The guess only
// sizes chunks, and stays bounded: since integer keys are unique, a chunk
// spanning step keys holds at most step rows, and the step never exceeds
// maxStride*n; a key space sparser than that is chunked by chunk.Upper.

import (
	"context"
	"database/sql"
	"fmt"
	"math/big"

	"github.com/shardctl/shardctl/chunk"
	"github.com/shardctl/shardctl/dbutil"
)

const (
	// maxStride caps a step at this many times the rows wanted, so the
	// worst chunk (a dense run right after a sparse one) holds 8n rows.
	maxStride = 8
	// overFull: a chunk with more rows than this many times n means the
	// density changed; the next bound is found by chunk.Upper again.
	overFull = 2
	// grow caps a step at this many times the width of the chunk before.
	grow = 2
)

// stride picks arithmetic chunk bounds on a single integer key.
type stride struct {
	n        int64    // rows wanted per chunk
	step     *big.Int // keys the next chunk spans; nil: unknown, chunk.Upper finds the bound
	min, max *big.Int // the source's smallest and largest key (without the filter) as last read; nil: the table was empty
	fresh    bool     // min and max were read after the last chunk
}

// strideKey reports whether k is one integer column, the keys stride can
// step through.
func strideKey(k chunk.Key) bool {
	if len(k.Cols) != 1 {
		return false
	}
	c := k.Cols[0]
	return c.Kind == chunk.Unsigned || c.Kind == chunk.Signed && c.Type != "YEAR"
}

// What next decided.
const (
	byUpper = iota // no step known: chunk.Upper finds the bound
	known          // hi is the bound (nil: open-ended, the last chunk)
	reread         // the step reaches the largest key as read before the last chunk: read it again (a live source grows), then ask again
)

// next is the bound of the chunk after lo.
func (s *stride) next(lo []string) (hi []string, what int) {
	if s.step == nil || s.max == nil {
		return nil, byUpper
	}
	from, ok := s.from(lo)
	if !ok {
		return nil, byUpper
	}
	h := new(big.Int).Add(from, s.step)
	switch {
	case h.Cmp(s.max) < 0:
		return []string{h.String()}, known
	case !s.fresh:
		return nil, reread
	}
	return nil, known
}

// from is the key a chunk after lo counts from: lo, or one below the
// smallest key when lo is nil (the first chunk).
func (s *stride) from(lo []string) (*big.Int, bool) {
	if lo == nil {
		if s.min == nil {
			return nil, false
		}
		return new(big.Int).Sub(s.min, big.NewInt(1)), true
	}
	if len(lo) != 1 {
		return nil, false
	}
	return new(big.Int).SetString(lo[0], 10)
}

// extent records the source's smallest and largest key as just read.
func (s *stride) extent(min, max *big.Int) {
	s.min, s.max, s.fresh = min, max, true
}

// observe learns from a chunk (lo, hi] that held rows source rows: the next
// step is its width scaled to n rows, at most grow times that width; none
// (chunk.Upper next) after an empty chunk or one far over n rows, or where
// the keys are too sparse for n rows within maxStride*n of them.
func (s *stride) observe(lo, hi []string, rows int64) {
	s.step, s.fresh = nil, false
	// An empty chunk says nothing of where the rows resume: a step could
	// walk a gap of any width a few keys at a time.
	if len(hi) != 1 || rows == 0 || rows > overFull*s.n {
		return
	}
	from, ok := s.from(lo)
	to, ok2 := new(big.Int).SetString(hi[0], 10)
	if !ok || !ok2 {
		return
	}
	width := new(big.Int).Sub(to, from)
	if width.Sign() <= 0 {
		return
	}
	ideal := new(big.Int).Mul(width, big.NewInt(s.n))
	ideal.Quo(ideal, big.NewInt(rows))
	if ideal.Cmp(big.NewInt(maxStride*s.n)) > 0 {
		return
	}
	if capped := new(big.Int).Mul(width, big.NewInt(grow)); ideal.Cmp(capped) > 0 {
		ideal = capped
	}
	if ideal.Sign() <= 0 {
		ideal.SetInt64(1)
	}
	s.step = ideal
}

// keyExtent reads the smallest and largest key of the source table (the
// index's ends, no filter: the filter's rows lie within them); nil when the
// table is empty.
func keyExtent(ctx context.Context, q dbutil.Querier, k chunk.Key) (min, max *big.Int, err error) {
	col := dbutil.QuoteIdent(k.Cols[0].Name)
	var lo, hi sql.NullString
	if err := q.QueryRowContext(ctx, "SELECT MIN("+col+"), MAX("+col+") FROM "+dbutil.Table(k.Schema, k.Table)).Scan(&lo, &hi); err != nil {
		return nil, nil, err
	}
	if !lo.Valid || !hi.Valid {
		return nil, nil, nil
	}
	min, ok := new(big.Int).SetString(lo.String, 10)
	max, ok2 := new(big.Int).SetString(hi.String, 10)
	if !ok || !ok2 {
		return nil, nil, nil
	}
	return min, max, nil
}

// stride is the arithmetic bound picker for sc's key, or nil where the key
// is not one integer column (or Verifier.upperOnly is set).
func (v *Verifier) stride(ctx context.Context, sc *scope) (*stride, error) {
	if v.upperOnly || !strideKey(sc.key) {
		return nil, nil
	}
	st := &stride{n: int64(v.chunkRows())}
	min, max, err := keyExtent(ctx, sc.src, sc.key)
	if err != nil {
		return nil, err
	}
	st.extent(min, max)
	return st, nil
}

// bound is the upper key of the chunk after lo (nil: open-ended) and
// whether more chunks follow: from st where it knows a step, else from the
// source's keys (chunk.Upper).
func (v *Verifier) bound(ctx context.Context, sc *scope, st *stride, lo []string) ([]string, bool, error) {
	if st != nil {
		hi, what := st.next(lo)
		if what == reread {
			min, max, err := keyExtent(ctx, sc.src, sc.key)
			if err != nil {
				return nil, false, fmt.Errorf("read the key's extent: %w", err)
			}
			st.extent(min, max)
			hi, what = st.next(lo)
		}
		if what == known {
			return hi, hi != nil, nil
		}
	}
	return chunk.Upper(ctx, sc.src, sc.key, lo, sc.where, sc.whereArgs, v.chunkRows())
}
