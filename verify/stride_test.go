package verify

import (
	"cmp"
	"context"
	"errors"
	"math/big"
	"slices"
	"strconv"
	"testing"

	"github.com/shardctl/shardctl/chunk"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/tables"
)

// walk chunks the sorted unique keys as table() does, with chunk.Upper
// played by an exact n-th-key lookup and a fresh extent on every reread;
// it returns each chunk's bound and rows, and how often it looked up.
func walk(t *testing.T, keys []int64, n int64) (his [][]string, rows []int64, uppers int) {
	t.Helper()
	st := &stride{n: n}
	ext := func() {
		if len(keys) == 0 {
			st.extent(nil, nil)
			return
		}
		st.extent(big.NewInt(keys[0]), big.NewInt(keys[len(keys)-1]))
	}
	ext()
	var lo []string
	for range 100000 {
		hi, what := st.next(lo)
		if what == reread {
			ext()
			if hi, what = st.next(lo); what == reread {
				t.Fatal("reread asked for twice in a row")
			}
		}
		if what == byUpper {
			uppers++
			from := 0
			if lo != nil {
				l, _ := strconv.ParseInt(lo[0], 10, 64)
				from, _ = slices.BinarySearch(keys, l+1)
			}
			hi = nil
			if from+int(n)-1 < len(keys) {
				hi = []string{strconv.FormatInt(keys[from+int(n)-1], 10)}
			}
		}
		var c int64
		for _, k := range keys {
			if (lo == nil || k > atoi(lo)) && (hi == nil || k <= atoi(hi)) {
				c++
			}
		}
		his, rows = append(his, hi), append(rows, c)
		st.observe(lo, hi, c)
		if hi == nil {
			return his, rows, uppers
		}
		if lo != nil && atoi(hi) <= atoi(lo) {
			t.Fatalf("bound %s after %s does not advance", hi, lo)
		}
		lo = hi
	}
	t.Fatal("no end")
	return
}

func atoi(s []string) int64 { v, _ := strconv.ParseInt(s[0], 10, 64); return v }

func keysFrom(ranges ...[3]int64) []int64 {
	var ks []int64
	for _, r := range ranges {
		for k := r[0]; k <= r[1]; k += r[2] {
			ks = append(ks, k)
		}
	}
	return ks
}

// Every key lands in exactly one chunk (the chunks add up to the table,
// the last is open-ended), no chunk holds more than maxStride*n rows,
// and contiguous keys are chunked with one lookup.
func TestStrideCoversEveryKeyWithBoundedChunks(t *testing.T) {
	const n = 100
	cases := map[string]struct {
		keys       []int64
		maxUppers  int
		chunksNear bool  // every chunk but the last holds n rows (±10%)
		n          int64 // rows per chunk, when not n
	}{
		"one row a chunk, a gap of 2^60": {keys: []int64{0, 1, 1 << 60, 1<<60 + 1}, maxUppers: 3, n: 1},
		"two rows a chunk, gaps":         {keys: keysFrom([3]int64{1, 100, 1}, [3]int64{1 << 50, 1<<50 + 1000, 7}), maxUppers: 8, n: 2},
		"contiguous":                     {keys: keysFrom([3]int64{1, 10000, 1}), maxUppers: 1, chunksNear: true},
		"negative start":                 {keys: keysFrom([3]int64{-5000, 4999, 1}), maxUppers: 1, chunksNear: true},
		"every third key":                {keys: keysFrom([3]int64{3, 30000, 3}), maxUppers: 1, chunksNear: true},
		"sparse then dense":              {keys: keysFrom([3]int64{1, 100000, 1000}, [3]int64{200000, 210000, 1}), maxUppers: 1 << 30},
		"dense then sparse":              {keys: keysFrom([3]int64{1, 5000, 1}, [3]int64{10000, 10_000_000, 5000}), maxUppers: 1 << 30},
		"holes":                          {keys: keysFrom([3]int64{1, 2000, 1}, [3]int64{50000, 52000, 1}, [3]int64{1 << 40, 1<<40 + 3000, 1}), maxUppers: 6},
		"a few rows":                     {keys: keysFrom([3]int64{7, 9, 1}), maxUppers: 1},
		"empty":                          {maxUppers: 1},
		"near the int64 limit":           {keys: keysFrom([3]int64{1<<63 - 5001, 1<<63 - 2, 1}), maxUppers: 1, chunksNear: true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			n := cmp.Or(c.n, n)
			his, rows, uppers := walk(t, c.keys, n)
			var sum int64
			for i, r := range rows {
				sum += r
				if r > maxStride*n {
					t.Errorf("chunk %d (up to %v) holds %d rows, more than %d", i, his[i], r, maxStride*n)
				}
				if c.chunksNear && i < len(rows)-1 && (r < n*9/10 || r > n*11/10) {
					t.Errorf("chunk %d (up to %v) holds %d rows, not about %d", i, his[i], r, n)
				}
			}
			if sum != int64(len(c.keys)) {
				t.Fatalf("chunks hold %d rows, the table %d", sum, len(c.keys))
			}
			if len(rows) > 2*len(c.keys)/int(n)+4 {
				t.Errorf("%d chunks for %d keys", len(rows), len(c.keys))
			}
			if uppers > c.maxUppers {
				t.Errorf("%d lookups, want at most %d", uppers, c.maxUppers)
			}
			t.Logf("%d keys: %d chunks, %d lookups", len(c.keys), len(rows), uppers)
		})
	}
}

// Keys added beyond the largest one read while the chunks walk are chunked
// too: reaching the old largest key reads it again instead of ending.
func TestStrideRereadsTheLargestKeyOfALiveTable(t *testing.T) {
	st := &stride{n: 10}
	st.extent(big.NewInt(1), big.NewInt(100))
	st.observe(nil, []string{"10"}, 10)
	if hi, what := st.next([]string{"10"}); what != known || !slices.Equal(hi, []string{"20"}) {
		t.Fatalf("next after 10: %v %d", hi, what)
	}
	st.observe([]string{"90"}, []string{"95"}, 5)
	if _, what := st.next([]string{"95"}); what != reread {
		t.Fatalf("past the largest key as read: %d, want a reread", what)
	}
	st.extent(big.NewInt(1), big.NewInt(1000))
	if hi, what := st.next([]string{"95"}); what != known || !slices.Equal(hi, []string{"105"}) {
		t.Fatalf("after the reread: %v %d", hi, what)
	}
	st.extent(big.NewInt(1), big.NewInt(100))
	if hi, what := st.next([]string{"95"}); what != known || hi != nil {
		t.Fatalf("no growth: %v %d, want the open-ended last chunk", hi, what)
	}
}

// Only one integer column is stepped through: YEAR, composite and other
// keys keep chunk.Upper.
func TestStrideKeys(t *testing.T) {
	col := func(typ string, kind chunk.Kind) chunk.Column { return chunk.Column{Name: "k", Type: typ, Kind: kind} }
	for _, c := range []struct {
		cols []chunk.Column
		want bool
	}{
		{[]chunk.Column{col("INT", chunk.Signed)}, true},
		{[]chunk.Column{col("UNSIGNED BIGINT", chunk.Unsigned)}, true},
		{[]chunk.Column{col("YEAR", chunk.Signed)}, false},
		{[]chunk.Column{col("VARCHAR", chunk.Char)}, false},
		{[]chunk.Column{col("DECIMAL", chunk.Decimal)}, false},
		{[]chunk.Column{col("INT", chunk.Signed), col("INT", chunk.Signed)}, false},
	} {
		if got := strideKey(chunk.Key{Cols: c.cols}); got != c.want {
			t.Errorf("%v: %v, want %v", c.cols, got, c.want)
		}
	}
}

// sparseDDL and sparseRows: integer keys in runs of every density, from
// even keys to gaps of a thousand to contiguous to near 2^62.
const sparseDDL = "CREATE TABLE s (id BIGINT NOT NULL PRIMARY KEY, v VARCHAR(20))"

var sparseRows = []string{
	"INSERT INTO s SELECT seq * 2, CONCAT('a', seq) FROM seq_1_to_1000",
	"INSERT INTO s SELECT 99000 + seq * 1000, CONCAT('b', seq) FROM seq_1_to_900",
	"INSERT INTO s SELECT 1000000 + seq, CONCAT('c', seq) FROM seq_1_to_1000",
	"INSERT INTO s SELECT 4611686018427387904 + seq, CONCAT('d', seq) FROM seq_1_to_500",
}

// On keys of every density, stepped bounds find each difference, including
// rows the target holds before the first key and beyond the last, keep
// every chunk within maxStride*ChunkRows rows, and a verification
// interrupted mid-table and resumed finds the same.
func TestSteppedBoundsOnSparseKeys(t *testing.T) {
	p := newPair(t, append([]string{sparseDDL}, sparseRows...)...)
	ctx := context.Background()
	tn := dbutil.Table(p.tname, "s")
	run(t, p.dst, "UPDATE "+tn+" SET v = 'x' WHERE id IN (1000, 1000500, 4611686018427388154)")
	run(t, p.dst, "DELETE FROM "+tn+" WHERE id = 500000")
	run(t, p.dst, "INSERT INTO "+tn+" VALUES (-5, 'before'), (4611686018427397904, 'beyond')")
	changed := []int64{-5, 1000, 500000, 1000500, 4611686018427388154, 4611686018427397904}
	tb := p.table(t, "s")
	const n = 100
	found := func(what string, res Result) {
		t.Helper()
		if res.Rows != 3400 || len(res.Mismatches) != len(changed) {
			t.Fatalf("%s: %d rows, %d differing chunks, want 3400 and %d: %+v", what, res.Rows, len(res.Mismatches), len(changed), res.Mismatches)
		}
		for i, k := range changed {
			if !inChunk(res.Mismatches[i], k) {
				t.Fatalf("%s: key %d not in differing chunk %d: %+v", what, k, i, res.Mismatches[i])
			}
		}
		if last := res.Mismatches[len(changed)-1]; last.Hi != nil || last.TargetRows != last.SourceRows+1 {
			t.Fatalf("%s: the last chunk is not open-ended with the extra row: %+v", what, last)
		}
	}
	for _, upperOnly := range []bool{true, false} {
		v := p.verifier(n)
		v.upperOnly = upperOnly
		var biggest int64
		v.Progress = func(_ string, rows int64) { biggest = max(biggest, rows) }
		// Stepped bounds among the even keys fall between keys too: the
		// proof that they were stepped, not looked up.
		between := 0
		v.Checkpoint = func(cp Checkpoint) error {
			if cp.After != nil && atoi(cp.After) < 2000 && atoi(cp.After)%2 != 0 {
				between++
			}
			return nil
		}
		res, err := v.All(ctx, []tables.Table{tb})
		if err != nil {
			t.Fatal(err)
		}
		what := map[bool]string{true: "chunk.Upper", false: "stepped"}[upperOnly]
		found(what, res)
		if biggest > maxStride*n {
			t.Fatalf("%s: a chunk of %d rows", what, biggest)
		}
		if (between > 0) == upperOnly {
			t.Fatalf("%s: %d chunks end between the even keys", what, between)
		}
		t.Logf("%s: %d chunks, the largest %d rows", what, res.Chunks, biggest)
	}

	stop := errors.New("interrupted")
	var last Checkpoint
	v := p.verifier(n)
	v.Checkpoint = func(cp Checkpoint) error {
		if cp.Partial.Chunks == 12 {
			return stop
		}
		last = cp
		return nil
	}
	if _, err := v.All(ctx, []tables.Table{tb}); !errors.Is(err, stop) {
		t.Fatalf("interrupted run: %v", err)
	}
	v = p.verifier(n)
	v.From = &last
	res, err := v.All(ctx, []tables.Table{tb})
	if err != nil {
		t.Fatal(err)
	}
	found("resumed after 11 chunks", res)
}
