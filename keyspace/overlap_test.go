package keyspace

import "testing"

func ik(v int64) *Key { k := IntK(v); return &k }

func rng(lo, hi *Key) Filter { return Filter{Column: "k", Ranges: []Range{{Lo: lo, Hi: hi}}} }

func TestOverlapRanges(t *testing.T) {
	a := rng(ik(0), ik(100))
	cases := []struct {
		name            string
		f, g            Filter
		overlap, within bool
	}{
		{"same", a, a, true, true},
		{"adjacent", a, rng(ik(100), ik(200)), false, false},
		{"inside", rng(ik(10), ik(20)), a, true, true},
		{"open last range", rng(ik(50), nil), a, true, false},
		{"open below", rng(nil, ik(1)), a, true, false},
		{"point inside", Filter{Column: "k", Points: []Key{IntK(99)}}, a, true, true},
		{"point at the bound", Filter{Column: "k", Points: []Key{IntK(100)}}, a, false, false},
		{"negated owned vs owned", Filter{Column: "k", Ranges: a.Ranges, Negate: true}, a, false, false},
		{"negated owned vs other", Filter{Column: "k", Ranges: a.Ranges, Negate: true}, rng(ik(100), nil), true, false},
		{"negated vs negated", Filter{Column: "k", Ranges: a.Ranges, Negate: true}, Filter{Column: "k", Negate: true}, true, true},
		{"all", Filter{}, a, true, false},
		{"empty", Filter{Column: "k"}, a, false, true},
	}
	for _, c := range cases {
		if got := c.f.Overlaps(c.g); got != c.overlap {
			t.Errorf("%s: Overlaps = %v, want %v", c.name, got, c.overlap)
		}
		if got := c.g.Overlaps(c.f); got != c.overlap {
			t.Errorf("%s: Overlaps (swapped) = %v, want %v", c.name, got, c.overlap)
		}
		if got := c.f.Within(c.g); got != c.within {
			t.Errorf("%s: Within = %v, want %v", c.name, got, c.within)
		}
	}
}

func TestEqualAfterASplit(t *testing.T) {
	whole := rng(ik(0), nil)
	cut := Filter{Column: "k", Ranges: []Range{{Lo: ik(500), Hi: nil}, {Lo: ik(0), Hi: ik(500)}}}
	if !whole.Equal(cut) || !cut.Equal(whole) {
		t.Fatal("a range cut in two must equal the range")
	}
	if whole.Equal(rng(ik(0), ik(500))) {
		t.Fatal("half a range equals the range")
	}
	s := Filter{Column: "k", Ranges: []Range{{Lo: &Key{Type: StringKey, Str: "m"}}}}
	if !s.Within(Filter{Column: "k", Ranges: []Range{{Lo: &Key{Type: StringKey, Str: ""}}}}) {
		t.Fatal("string range within the whole string space")
	}
}

func TestOverlapArcs(t *testing.T) {
	h := func(c byte) string {
		b := make([]byte, 32)
		for i := range b {
			b[i] = c
		}
		return string(b)
	}
	arc := func(a, b string) Filter { return Filter{Column: "k", Arcs: []Arc{{After: a, Upto: b}}} }
	x := arc(h('2'), h('8'))
	if !x.Overlaps(arc(h('7'), h('9'))) || x.Overlaps(arc(h('8'), h('9'))) {
		t.Fatal("plain arcs")
	}
	wrap := arc(h('c'), h('3')) // (c…, 3…] wraps past ffff…
	if !wrap.Overlaps(x) || !wrap.Overlaps(arc(h('e'), h('f'))) || wrap.Overlaps(arc(h('4'), h('b'))) {
		t.Fatal("wrapping arc")
	}
	// A point splits an arc: the two halves equal the arc.
	if !arc(h('2'), h('8')).Equal(Filter{Column: "k", Arcs: []Arc{{After: h('2'), Upto: h('5')}, {After: h('5'), Upto: h('8')}}}) {
		t.Fatal("split arc")
	}
	if !wrap.Equal(Filter{Column: "k", Arcs: []Arc{{After: h('c'), Upto: h('f')}, {After: h('f'), Upto: h('3')}}}) {
		t.Fatal("split wrapping arc")
	}
	full := arc(h('5'), h('5'))
	if !x.Within(full) || full.Within(x) {
		t.Fatal("whole ring")
	}
	// Ring and key space cannot be compared: cautious answers.
	if !x.Overlaps(rng(ik(0), ik(1))) || x.Within(rng(nil, nil)) {
		t.Fatal("mixed spaces must overlap and not be within")
	}
	if (Filter{Column: "k", Arcs: x.Arcs, Negate: true}).Overlaps(x) {
		t.Fatal("negated arc meets the arc")
	}
}
