package keyspace

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"
)

func TestParseKey(t *testing.T) {
	if k, err := ParseKey("-9223372036854775808", IntKey); err != nil || k.Int != math.MinInt64 {
		t.Fatalf("min int: %v %v", k, err)
	}
	for _, bad := range []string{"abc", "1.5", "9223372036854775808", ""} {
		if _, err := ParseKey(bad, IntKey); err == nil {
			t.Errorf("ParseKey(%q, INT) accepted", bad)
		}
	}
	if k, err := ParseKey("abc", StringKey); err != nil || k.Str != "abc" {
		t.Fatal(k, err)
	}
}

func TestRangeContains(t *testing.T) {
	lo, hi := IntK(100), IntK(200)
	r := Range{Lo: &lo, Hi: &hi}
	for k, want := range map[int64]bool{99: false, 100: true, 199: true, 200: false} {
		if r.Contains(IntK(k)) != want {
			t.Errorf("%s contains %d: want %v", r, k, want)
		}
	}
	if !(Range{Lo: &lo}).Contains(IntK(math.MaxInt64)) || (Range{Hi: &hi}).Contains(IntK(200)) {
		t.Error("open-ended ranges")
	}
}

func TestHashOfMatchesMySQLMD5(t *testing.T) {
	sum := md5.Sum([]byte("12345"))
	want := hex.EncodeToString(sum[:])
	for _, v := range []any{int64(12345), "12345", []byte("12345"), uint32(12345)} {
		if h, _ := HashOf(v); h != want {
			t.Errorf("HashOf(%T) = %s, want %s", v, h, want)
		}
	}
}

// Owner must follow the book: greatest point below the hash, else the greatest point.
func TestOwnerAndArcsPartitionTheRing(t *testing.T) {
	points := []string{"40000000000000000000000000000000", "c0000000000000000000000000000000", "80000000000000000000000000000000"}
	cases := map[string]int{
		"00000000000000000000000000000001": 1, // below every point: the greatest
		"40000000000000000000000000000000": 1, // equal is not below
		"40000000000000000000000000000001": 0,
		"80000000000000000000000000000001": 2,
		"ffffffffffffffffffffffffffffffff": 1,
	}
	for h, want := range cases {
		if got := Owner(points, h); got != want {
			t.Errorf("Owner(%s) = %d, want %d", h, got, want)
		}
	}
	// Every hash is on exactly the arc of its owner.
	for i := 0; i < 2000; i++ {
		h, _ := HashOf(int64(i))
		owner := Owner(points, h)
		for j, p := range points {
			if ArcOf(points, p).Contains(h) != (j == owner) {
				t.Fatalf("hash %s: arc of %s says %v, owner is %d", h, p, !(j == owner), owner)
			}
		}
	}
}

func TestMidpoint(t *testing.T) {
	a := Arc{After: "40000000000000000000000000000000", Upto: "80000000000000000000000000000000"}
	if m := Midpoint(a); m != "60000000000000000000000000000000" {
		t.Fatalf("midpoint %s", m)
	}
	w := Arc{After: "c0000000000000000000000000000000", Upto: "40000000000000000000000000000000"}
	if m := Midpoint(w); m != "00000000000000000000000000000000" {
		t.Fatalf("wrapping midpoint %s", m)
	}
	if m := Midpoint(w); !w.Contains(m) && m != w.After {
		t.Fatalf("midpoint %s not on arc", m)
	}
}

func TestFilterSQLAndMatchAgree(t *testing.T) {
	q := func(s string) string { return "`" + s + "`" }
	lo, hi := IntK(100), IntK(200)
	f := Filter{Column: "emp_no", Ranges: []Range{{Lo: &lo, Hi: &hi}}}
	sql, args := f.SQL(q)
	if sql != "((`emp_no` >= ? AND `emp_no` < ?))" || fmt.Sprint(args) != "[100 200]" {
		t.Fatalf("range SQL %s %v", sql, args)
	}
	neg := f
	neg.Negate = true
	sql, _ = neg.SQL(q)
	if !strings.Contains(sql, "NOT") || !strings.Contains(sql, "IS NOT NULL") {
		t.Fatalf("negated SQL %s", sql)
	}
	for _, c := range []struct {
		v    any
		want bool
	}{{int64(99), false}, {int64(100), true}, {[]byte("150"), true}, {int32(200), false}} {
		v, want := c.v, c.want
		got, err := f.Match(v)
		if err != nil || got != want {
			t.Errorf("Match(%v) = %v %v, want %v", v, got, err, want)
		}
		got, _ = neg.Match(v)
		if got == want {
			t.Errorf("negated Match(%v) = %v", v, got)
		}
	}
	if ok, _ := neg.Match(nil); ok {
		t.Error("a NULL key must not be selected for deletion")
	}
	if ok, _ := (Filter{}).Match(nil); !ok {
		t.Error("the empty filter selects every row")
	}
	arc := Filter{Column: "k", Arcs: []Arc{{After: "c0000000000000000000000000000000", Upto: "40000000000000000000000000000000"}}}
	sql, _ = arc.SQL(q)
	if !strings.Contains(sql, "MD5(CONCAT(`k`)) > ? OR MD5(CONCAT(`k`)) <= ?") {
		t.Fatalf("wrapping arc SQL %s", sql)
	}
	var in int
	var keys []string
	for i := 0; i < 1000; i++ {
		ok, _ := arc.Match(int64(i))
		if ok {
			in++
			keys = append(keys, fmt.Sprint(i))
		}
	}
	sort.Strings(keys)
	if in < 350 || in > 650 {
		t.Fatalf("half the ring should hold about half the keys, got %d", in)
	}
	pts := Filter{Column: "r", Points: []Key{StrK("eu"), StrK("us")}}
	if ok, _ := pts.Match("eu"); !ok {
		t.Error("list point")
	}
	if ok, _ := pts.Match("asia"); ok {
		t.Error("list point mismatch")
	}
	if _, err := f.Match(3.5); err == nil {
		t.Error("a float key for an INT range must be an error")
	}
}
