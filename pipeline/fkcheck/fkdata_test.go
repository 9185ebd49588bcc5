package fkcheck

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/tables"
)

// rentalsSplit makes schema with Sakila's shape (payments reference rentals
// by the rental's id; both carry the shard key emp_no), a view n of 1..10^6
// and rows from fill, and returns a split plan of it at emp_no 500.
func rentalsSplit(t *testing.T, schema string, fill ...string) (*sql.DB, *plans.Plan) {
	t.Helper()
	env := testenv.Get(t)
	db := env.DB(t, 1, "")
	testenv.Schema(t, db, schema, append([]string{
		"CREATE TABLE rentals (rental_id INT NOT NULL PRIMARY KEY, emp_no INT NOT NULL, KEY (emp_no))",
		"CREATE TABLE payments (payment_id INT NOT NULL PRIMARY KEY, emp_no INT NOT NULL, rental_id INT NULL, KEY (emp_no)," +
			" CONSTRAINT fk_pr FOREIGN KEY (rental_id) REFERENCES rentals (rental_id))",
		// 1..1,000,000 from digits: the same statements on both flavors.
		"CREATE TABLE d (d INT NOT NULL PRIMARY KEY)",
		"INSERT INTO d VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9)",
		"CREATE VIEW n AS SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d + 100000 * g.d + 1 AS seq FROM d a, d b, d c, d e, d f, d g",
	}, fill...)...)
	ts, err := tables.Inspect(context.Background(), db, schema)
	if err != nil {
		t.Fatal(err)
	}
	at := keyspace.IntK(500)
	for i := range ts {
		ts[i].Sharded, ts[i].ShardColumn = true, "emp_no"
		ts[i].Filter = keyspace.Filter{Column: "emp_no", Ranges: []keyspace.Range{{Lo: &at}}}
	}
	p := plans.New("split", "")
	p.Source = plans.Endpoint{ShardID: 1, Host: env.Addr(1).Host, Port: env.Addr(1).Port, Schema: schema}
	p.Copy = ts
	return db, p
}

// A split's check of a foreign key without the shard key reads every child
// row, in chunks joined on several sessions at once: crossings planted in
// the first, a middle and the very last row are all counted, every row is
// counted once, the rows named are the first ones in key order, and the
// pace is asked once per chunk.
func TestKeyCheckReadsEveryChunk(t *testing.T) {
	const children = 2*keyCheckChunk + 1 // three chunks, the last of one row
	db, p := rentalsSplit(t, "fkrows",
		"INSERT INTO rentals SELECT seq, seq % 1000 FROM n WHERE seq <= 60000",
		"INSERT INTO payments SELECT seq, ((seq % 60000) + 1) % 1000, (seq % 60000) + 1 FROM n WHERE seq <= 100001",
		// Crossings: the child's employee on the other side of 500 from its rental's.
		"UPDATE payments SET emp_no = IF(emp_no >= 500, 1, 999) WHERE payment_id IN (7, 60000, 100001)")
	paced := 0
	checks, crossing, err := CheckKeysOnData(context.Background(), db, p, "planning", func(context.Context, int) error { paced++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	// Each chunk holds a crossing: each is joined, so its rows are named.
	if len(checks) != 1 || checks[0].Rows != children || checks[0].Leaving+checks[0].Orphaned != 3 || checks[0].Joined != 3 {
		t.Fatalf("key checks: %+v", checks)
	}
	if paced != 3 {
		t.Errorf("the pace was asked %d times for 3 chunks", paced)
	}
	i7, i60k, ilast := strings.Index(crossing, "=(7)"), strings.Index(crossing, "=(60000)"), strings.Index(crossing, "=(100001)")
	if i7 < 0 || i60k < i7 || ilast < i60k {
		t.Fatalf("the rows named, in key order: %s", crossing)
	}
}

// A chunk whose children reference a narrow range of parents is matched by
// key range, without a join: children without a parent (a NULL key, or a
// parent missing while foreign_key_checks was off) cross nothing, as in the
// join; a chunk whose parents are spread too wide is joined.
func TestKeyCheckMatchesByRange(t *testing.T) {
	db, p := rentalsSplit(t, "fkrange",
		"INSERT INTO rentals SELECT seq, seq % 1000 FROM n WHERE seq <= 20000",
		"INSERT INTO payments SELECT seq, (((seq - 1) % 20000) + 1) % 1000, ((seq - 1) % 20000) + 1 FROM n WHERE seq <= 30000",
		"INSERT INTO payments SELECT 30000 + seq, 999, NULL FROM n WHERE seq <= 100",
		"SET foreign_key_checks = 0",
		// Missing parents, on the other side of 500 from a parent that would stay.
		"INSERT INTO payments SELECT 30100 + seq, 999, 25000 + seq FROM n WHERE seq <= 10")
	check := func(what string, rows, joined int64) {
		t.Helper()
		checks, crossing, err := CheckKeysOnData(context.Background(), db, p, "planning", nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(checks) != 1 || checks[0].Rows != rows || checks[0].Leaving+checks[0].Orphaned != 0 || checks[0].Joined != joined || crossing != "" {
			t.Fatalf("%s: key checks %+v, crossing %q; want %d rows, %d chunks joined", what, checks, crossing, rows, joined)
		}
	}
	check("children of a narrow range of parents", 30110, 0)
	// One parent far away: the chunk's parents span 10M keys for 30k children.
	testenv.InSchema(t, db, "fkrange",
		"INSERT INTO rentals VALUES (10000000, 0)",
		"INSERT INTO payments VALUES (40000, 0, 10000000)")
	check("parents spread wide", 30111, 1)
}

// A chunk whose children are all on one side is settled by the sums of the
// children and of the parents in their range when those parents are on the
// same side; when some parents in the range are on the other side, the
// lists decide: parents no child references cross nothing, a child whose
// parent is on the other side is a crossing (the chunk is joined and the
// row named).
func TestKeyCheckMatchesUniformChunks(t *testing.T) {
	// Rentals 1..100,000, those from 50,001 on moving (emp_no 500 and up),
	// except the even ones, flipped to the other side; payments reference the
	// odd rentals only, each on its rental's side: two chunks of children,
	// the first all staying, the second all moving.
	db, p := rentalsSplit(t, "fkuniform",
		"INSERT INTO rentals SELECT seq, IF(seq % 2 = 0, 999 - (seq - 1) DIV 100, (seq - 1) DIV 100) FROM n WHERE seq <= 100000",
		"INSERT INTO payments SELECT seq, (seq - 1) DIV 100, seq - 1 + seq % 2 FROM n WHERE seq <= 100000")
	check := func(what string, crossings, joined int64, named string) {
		t.Helper()
		checks, crossing, err := CheckKeysOnData(context.Background(), db, p, "planning", nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(checks) != 1 || checks[0].Rows != 100000 || checks[0].Leaving+checks[0].Orphaned != crossings || checks[0].Joined != joined || !strings.Contains(crossing, named) {
			t.Fatalf("%s: key checks %+v, crossing %q; want %d crossings, %d chunks joined", what, checks, crossing, crossings, joined)
		}
	}
	check("parents in range on the other side, none referenced", 0, 0, "")
	// One staying child (payment 2, emp_no 0) now references a moving rental (2).
	testenv.InSchema(t, db, "fkuniform", "UPDATE payments SET rental_id = 2 WHERE payment_id = 2")
	check("a staying child of a moving parent", 1, 1, "=(2) -> rentals")
	// The sums alone: every rental on its payments' side.
	testenv.InSchema(t, db, "fkuniform", "UPDATE rentals SET emp_no = (rental_id - 1) DIV 100", "UPDATE payments SET rental_id = payment_id")
	check("parents on the children's side", 0, 0, "")
}

// A list cut short by group_concat_max_len (here a few bytes, or about
// 1 KB: cut inside a key or after a comma, far before the crossing child
// near the end of the children's list) is never matched: the chunk is
// joined, and finds what the whole lists do. The children all stay, their
// parents too but one: the lists are read, and a key cut short names a
// parent on its child's side (no crossing that would have the chunk joined
// anyway).
func TestKeyCheckListCutShort(t *testing.T) {
	db, p := rentalsSplit(t, "fkcut",
		"INSERT INTO rentals SELECT seq, seq % 500 FROM n WHERE seq <= 20000",
		"INSERT INTO payments SELECT seq, seq % 500, seq FROM n WHERE seq <= 20000",
		"UPDATE rentals SET emp_no = 999 WHERE rental_id = 19998")
	defer func(m int) { keyListMax = m }(keyListMax)
	for _, m := range []int{keyListMax, 4, 1024, 1025, 1026} {
		keyListMax = m
		checks, crossing, err := CheckKeysOnData(context.Background(), db, p, "planning", nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(checks) != 1 || checks[0].Rows != 20000 || checks[0].Orphaned != 1 || checks[0].Joined != 1 || !strings.Contains(crossing, "=(19998)") {
			t.Fatalf("group_concat_max_len %d: key checks %+v, crossing %q", m, checks, crossing)
		}
	}
}

// The GROUP_CONCAT lists of key-range matching: integers, comma separated;
// anything else is refused (a list cut short inside a key is caught by its
// length, see TestKeyCheckListCutShort), so the chunk is joined.
func TestEachInt(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string
		ok   bool
	}{
		{"", "", true},
		{"12", "12", true},
		{"12,-3,0", "12 -3 0", true},
		{"9223372036854775807,-9223372036854775808", "9223372036854775807 -9223372036854775808", true},
		{"12,", "12", false},
		{"12,,3", "12", false},
		{",12", "", false},
		{"12s", "", false},
		{"1 2", "", false},
		{"-", "", false},
		{"--1", "", false},
		{"+1", "", false},
		{"9223372036854775808", "", false},
		{"-9223372036854775809", "", false},
		{"99999999999999999999", "", false},
		{"5,13", "5", false}, // fn refuses 13
	} {
		var got []string
		ok := eachInt([]byte(c.in), func(v int64) bool {
			if v == 13 {
				return false
			}
			got = append(got, fmt.Sprint(v))
			return true
		})
		if strings.Join(got, " ") != c.want || ok != c.ok {
			t.Errorf("eachInt(%q) = %q, %v; want %q, %v", c.in, strings.Join(got, " "), ok, c.want, c.ok)
		}
	}
}

// The value walk over simulated keys: every key falls in exactly one chunk
// (the first open below, the last open above), and no chunk holds more than
// 2 chunks' rows, over dense keys, sparse keys, and a dense run after a gap
// of a billion key values; the key walk is asked only to cross gaps.
func TestValueWalkCoversEveryKeyInBoundedChunks(t *testing.T) {
	seq := func(from, n, step int64) []int64 {
		ks := make([]int64, n)
		for i := range ks {
			ks[i] = from + int64(i)*step
		}
		return ks
	}
	cases := []struct {
		name     string
		keys     []int64
		maxWalks int
	}{
		{"dense", seq(1, 200_001, 1), 0},
		{"sparse", seq(-5_000_000, 300_000, 1000), 2},
		{"a gap, then dense", append(seq(1, 60_000, 1), seq(1_000_000_000, 250_000, 1)...), 4},
		{"one key", []int64{42}, 0},
		{"keys across the int64 range", []int64{math.MinInt64 + 1, -7, 0, 1 << 40, math.MaxInt64}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newValueWalkOf(c.keys[0], c.keys[len(c.keys)-1])
			// count: keys in (lo, hi]; nil bounds are open.
			count := func(lo, hi []string) int64 {
				i, j := 0, len(c.keys)
				if lo != nil {
					i = sort.Search(len(c.keys), func(x int) bool { return c.keys[x] > mustInt(t, lo[0]) })
				}
				if hi != nil {
					j = sort.Search(len(c.keys), func(x int) bool { return c.keys[x] > mustInt(t, hi[0]) })
				}
				return int64(max(0, j-i))
			}
			walks, chunks := 0, 0
			var after []string
			var total, most int64
			for ; ; chunks++ {
				if chunks > 10_000 {
					t.Fatal("the walk does not end")
				}
				upper, more, width, err := w.chunk(after, func(n int) ([]string, bool, error) {
					walks++
					var lo int64 = -1 << 63
					if after != nil {
						lo = mustInt(t, after[0])
					}
					i := sort.Search(len(c.keys), func(x int) bool { return c.keys[x] > lo }) + n - 1
					if i >= len(c.keys) {
						return nil, false, nil
					}
					return []string{fmt.Sprint(c.keys[i])}, true, nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if !more {
					upper = nil
				}
				n := count(after, upper)
				if n > 2*keyCheckChunk {
					t.Fatalf("chunk (%v, %v] holds %d rows", after, upper, n)
				}
				total += n
				most = max(most, n)
				w.read(width, n)
				if !more {
					break
				}
				after = upper
			}
			t.Logf("%d keys: %d chunks, the largest %d rows; %d key walks", len(c.keys), chunks+1, most, walks)
			if total != int64(len(c.keys)) {
				t.Errorf("the chunks hold %d keys of %d", total, len(c.keys))
			}
			if walks > c.maxWalks {
				t.Errorf("the key walk was asked %d times (at most %d)", walks, c.maxWalks)
			}
		})
	}
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
