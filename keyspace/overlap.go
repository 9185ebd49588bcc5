package keyspace

import (
	"math"
	"sort"
)

// Key-space algebra for the safety interlocks: does a delete's filter reach
// keys a live mapping owns, does a plan's shard still own the keys it owned.
//
// A filter is read as two sets of half-open intervals: one over keys (ranges,
// and list points as one-key ranges) and one over ring hashes (arcs). The two
// spaces cannot be compared with each other, so wherever a question mixes
// them the answer is the cautious one: they overlap, and neither is within
// the other. The sharding column is not compared (callers compare filters of
// one table's function). NULL keys, which no mapping owns, are ignored.

// span is [lo, hi) over one ordered space; nil is unbounded.
type span struct{ lo, hi *Key }

type spans struct {
	keys, hashes []span
}

func (f Filter) spans() spans {
	var s spans
	for _, r := range f.Ranges {
		s.keys = append(s.keys, span{r.Lo, r.Hi})
	}
	for _, p := range f.Points {
		p := p
		s.keys = append(s.keys, span{&p, succ(p)})
	}
	for _, a := range f.Arcs {
		after, upto := StrK(a.After), StrK(a.Upto)
		switch {
		case a.After < a.Upto:
			s.hashes = append(s.hashes, span{succ(after), succ(upto)})
		case a.After == a.Upto: // one point: the whole ring
			s.hashes = append(s.hashes, span{})
		default: // wraps past ffff…
			s.hashes = append(s.hashes, span{succ(after), nil}, span{nil, succ(upto)})
		}
	}
	return s
}

// succ is the smallest key above k (nil when there is none).
func succ(k Key) *Key {
	if k.Type == StringKey {
		n := StrK(k.Str + "\x00")
		return &n
	}
	if k.Int == math.MaxInt64 {
		return nil
	}
	n := IntK(k.Int + 1)
	return &n
}

func (a span) empty() bool { return a.lo != nil && a.hi != nil && a.lo.Compare(*a.hi) >= 0 }

func (a span) meets(b span) bool {
	if a.empty() || b.empty() {
		return false
	}
	// a and b intersect unless one ends at or before the other starts.
	if a.hi != nil && b.lo != nil && a.hi.Compare(*b.lo) <= 0 {
		return false
	}
	if b.hi != nil && a.lo != nil && b.hi.Compare(*a.lo) <= 0 {
		return false
	}
	return true
}

// merged sorts spans and joins those that touch or overlap.
func merged(ss []span) []span {
	var in []span
	for _, s := range ss {
		if !s.empty() {
			in = append(in, s)
		}
	}
	sort.Slice(in, func(i, j int) bool {
		if in[i].lo == nil || in[j].lo == nil {
			return in[i].lo == nil && in[j].lo != nil
		}
		return in[i].lo.Compare(*in[j].lo) < 0
	})
	var out []span
	for _, s := range in {
		if n := len(out); n > 0 {
			last := &out[n-1]
			if last.hi == nil || s.lo == nil || s.lo.Compare(*last.hi) <= 0 {
				if last.hi != nil && (s.hi == nil || s.hi.Compare(*last.hi) > 0) {
					last.hi = s.hi
				}
				continue
			}
		}
		out = append(out, s)
	}
	return out
}

// covered reports whether every span of a lies within the union of b.
func covered(a, b []span) bool {
	mb := merged(b)
	for _, s := range merged(a) {
		ok := false
		for _, c := range mb {
			loOK := c.lo == nil || s.lo != nil && c.lo.Compare(*s.lo) <= 0
			hiOK := c.hi == nil || s.hi != nil && s.hi.Compare(*c.hi) <= 0
			if loOK && hiOK {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func anyMeet(a, b []span) bool {
	for _, x := range a {
		for _, y := range b {
			if x.meets(y) {
				return true
			}
		}
	}
	return false
}

func nonEmpty(ss []span) bool {
	for _, s := range ss {
		if !s.empty() {
			return true
		}
	}
	return false
}

// Empty reports whether the filter selects no key at all (a positive filter
// with no ranges, arcs or points).
func (f Filter) Empty() bool {
	if f.All() || f.Negate {
		return false
	}
	s := f.spans()
	return !nonEmpty(s.keys) && !nonEmpty(s.hashes)
}

// overlapsPos: positive filters a and b select a common key (cautious across spaces).
func overlapsPos(a, b spans) bool {
	if anyMeet(a.keys, b.keys) || anyMeet(a.hashes, b.hashes) {
		return true
	}
	return nonEmpty(a.keys) && nonEmpty(b.hashes) || nonEmpty(a.hashes) && nonEmpty(b.keys)
}

// withinPos: every key positive filter a selects, b selects too (cautious across spaces).
func withinPos(a, b spans) bool {
	if nonEmpty(a.keys) && !covered(a.keys, b.keys) {
		return false
	}
	if nonEmpty(a.hashes) && !covered(a.hashes, b.hashes) {
		return false
	}
	return true
}

// Overlaps reports whether some key is selected by both f and g. It errs on
// the side of true: the interlocks refuse a delete that might reach live keys.
func (f Filter) Overlaps(g Filter) bool {
	switch {
	case f.Empty() || g.Empty():
		return false
	case f.All() || g.All():
		return true
	case f.Negate && g.Negate:
		return true // two complements of bounded sets always share keys
	case f.Negate:
		return !withinPos(g.spans(), f.spans()) // G meets not-F unless G lies within F
	case g.Negate:
		return !withinPos(f.spans(), g.spans())
	}
	return overlapsPos(f.spans(), g.spans())
}

// Within reports whether every key f selects is also selected by g. It errs
// on the side of false.
func (f Filter) Within(g Filter) bool {
	switch {
	case f.Empty() || g.All():
		return true
	case f.All():
		return false
	case f.Negate && !g.Negate:
		return false
	case f.Negate && g.Negate:
		// not F within not G  <=>  G within F
		return withinPos(g.spans(), f.spans())
	case g.Negate:
		// F within not G  <=>  F and G share nothing
		return !overlapsPos(f.spans(), g.spans())
	}
	return withinPos(f.spans(), g.spans())
}

// Equal reports whether f and g select the same keys (so a range cut in two
// equals the range it was cut from).
func (f Filter) Equal(g Filter) bool { return f.Within(g) && g.Within(f) }
