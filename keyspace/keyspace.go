// Package keyspace is the pure logic of sharding keys: typed keys, [low, high)
// ranges, the MD5 consistent-hash ring of the book, and the row filter that
// copy, binlog apply, verify and prune share. It touches no database.
package keyspace

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// KeyType is the type of a partition function's keys.
type KeyType string

const (
	IntKey    KeyType = "INT"    // signed 64-bit integers
	StringKey KeyType = "STRING" // byte strings, compared bytewise
)

// ParseKeyType accepts INT or STRING in any case.
func ParseKeyType(s string) (KeyType, error) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "INT", "INTEGER", "BIGINT":
		return IntKey, nil
	case "STRING", "STR", "VARCHAR":
		return StringKey, nil
	}
	return "", fmt.Errorf("key type %q: use INT or STRING", s)
}

// Key is one sharding key value.
type Key struct {
	Type KeyType
	Int  int64
	Str  string
}

// IntK and StrK build keys.
func IntK(v int64) Key  { return Key{Type: IntKey, Int: v} }
func StrK(s string) Key { return Key{Type: StringKey, Str: s} }

// ParseKey parses s as a key of type t. A non-integer for an INT function is refused.
func ParseKey(s string, t KeyType) (Key, error) {
	switch t {
	case IntKey:
		v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return Key{}, fmt.Errorf("key %q is not a signed 64-bit integer, and this partition function takes INT keys", s)
		}
		return IntK(v), nil
	case StringKey:
		return StrK(s), nil
	}
	return Key{}, fmt.Errorf("unknown key type %q", t)
}

// String renders the key as an operator would type it.
func (k Key) String() string {
	if k.Type == StringKey {
		return k.Str
	}
	return strconv.FormatInt(k.Int, 10)
}

// Value is the key as a SQL argument.
func (k Key) Value() any {
	if k.Type == StringKey {
		return k.Str
	}
	return k.Int
}

// Compare orders keys of the same type: -1, 0 or 1.
func (k Key) Compare(o Key) int {
	if k.Type == StringKey {
		return strings.Compare(k.Str, o.Str)
	}
	switch {
	case k.Int < o.Int:
		return -1
	case k.Int > o.Int:
		return 1
	}
	return 0
}

// Range is [Lo, Hi). A nil Hi is unbounded above; a nil Lo unbounded below.
type Range struct {
	Lo *Key `json:"lo,omitempty"`
	Hi *Key `json:"hi,omitempty"`
}

// Contains reports whether k is in the range.
func (r Range) Contains(k Key) bool {
	if r.Lo != nil && k.Compare(*r.Lo) < 0 {
		return false
	}
	if r.Hi != nil && k.Compare(*r.Hi) >= 0 {
		return false
	}
	return true
}

// String renders [lo, hi).
func (r Range) String() string {
	lo, hi := "-inf", "+inf"
	if r.Lo != nil {
		lo = r.Lo.String()
	}
	if r.Hi != nil {
		hi = r.Hi.String()
	}
	return "[" + lo + ", " + hi + ")"
}

// HashOf is the book's ring position of a value: the lowercase hex MD5 of its
// text form, which is what MySQL's MD5(col) computes for the same value.
func HashOf(v any) (string, error) {
	b, err := textOf(v)
	if err != nil {
		return "", err
	}
	sum := md5.Sum(b)
	return hex.EncodeToString(sum[:]), nil
}

// ValidHash reports whether h is a 32-character lowercase hex MD5.
func ValidHash(h string) bool {
	if len(h) != 32 {
		return false
	}
	for _, c := range h {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Arc is the part of the ring a point owns: hashes h with After < h <= Upto,
// wrapping past ffff… when After >= Upto. This is the book's rule: a key goes
// to the point with the largest hash below its own, or to the largest point
// when there is none.
type Arc struct {
	After string `json:"after"`
	Upto  string `json:"upto"`
}

// Contains reports whether hash h is on the arc.
func (a Arc) Contains(h string) bool {
	if a.After < a.Upto {
		return h > a.After && h <= a.Upto
	}
	return h > a.After || h <= a.Upto // wraps (or the whole ring when After == Upto)
}

// Owner returns the index into points (any order) of the point that owns hash h.
func Owner(points []string, h string) int {
	best, max := -1, -1
	for i, p := range points {
		if p < h && (best < 0 || p > points[best]) {
			best = i
		}
		if max < 0 || p > points[max] {
			max = i
		}
	}
	if best < 0 {
		return max
	}
	return best
}

// ArcOf returns the arc owned by point p given all points of the ring.
func ArcOf(points []string, p string) Arc {
	sorted := append([]string(nil), points...)
	sort.Strings(sorted)
	for i, q := range sorted {
		if q == p {
			next := sorted[(i+1)%len(sorted)]
			return Arc{After: p, Upto: next}
		}
	}
	return Arc{After: p, Upto: p}
}

// Midpoint returns the hash halfway along the arc (After, Upto], for a split that halves an arc.
func Midpoint(a Arc) string {
	lo := hexToBig(a.After)
	hi := hexToBig(a.Upto)
	if a.After >= a.Upto { // wrapping arc: add the ring size to hi
		hi = addRing(hi)
	}
	mid := halfSum(lo, hi)
	return bigToHex(mid)
}

// Filter selects rows by their sharding column: all rows when Column is empty,
// else rows whose key is in any of Ranges, on any of Arcs, or equal to any of
// Points; Negate selects the complement (what prune deletes).
type Filter struct {
	Column string  `json:"column,omitempty"`
	Ranges []Range `json:"ranges,omitempty"`
	Arcs   []Arc   `json:"arcs,omitempty"`
	Points KeyList `json:"points,omitempty"`
	Negate bool    `json:"negate,omitempty"`
}

// All reports whether the filter selects every row.
func (f Filter) All() bool { return f.Column == "" }

// SQL renders the filter as a WHERE fragment with ? placeholders. quote quotes identifiers.
func (f Filter) SQL(quote func(string) string) (string, []any) {
	if f.All() {
		return "1=1", nil
	}
	var args []any
	q := f.render(quote(f.Column), func(v any) string { args = append(args, v); return "?" })
	return q, args
}

// SQLLiteral renders the filter over the column expression col (for example
// NEW.`emp_no` in a trigger) with its values as literals: integers in decimal,
// strings as hex literals, so no value is ever pasted into SQL as text.
func (f Filter) SQLLiteral(col string) string {
	if f.All() {
		return "1=1"
	}
	return f.render(col, func(v any) string {
		switch x := v.(type) {
		case int64:
			return strconv.FormatInt(x, 10)
		case string:
			return "X'" + hex.EncodeToString([]byte(x)) + "'"
		}
		panic(fmt.Sprintf("keyspace: unexpected filter value %T", v))
	})
}

func (f Filter) render(col string, arg func(any) string) string {
	var parts []string
	for _, r := range f.Ranges {
		var p []string
		if r.Lo != nil {
			p = append(p, col+" >= "+arg(r.Lo.Value()))
		}
		if r.Hi != nil {
			p = append(p, col+" < "+arg(r.Hi.Value()))
		}
		if len(p) == 0 {
			p = append(p, col+" IS NOT NULL")
		}
		parts = append(parts, "("+strings.Join(p, " AND ")+")")
	}
	for _, a := range f.Arcs {
		// CONCAT: the value's text, as MariaDB's MD5(col) hashes it; MySQL 9.7's
		// MD5 (component_classic_hashing) refuses a number.
		h := "MD5(CONCAT(" + col + "))"
		if a.After < a.Upto {
			parts = append(parts, "("+h+" > "+arg(a.After)+" AND "+h+" <= "+arg(a.Upto)+")")
		} else {
			parts = append(parts, "("+h+" > "+arg(a.After)+" OR "+h+" <= "+arg(a.Upto)+")")
		}
	}
	if len(f.Points) > 0 {
		ps := make([]string, len(f.Points))
		for i, p := range f.Points {
			ps[i] = arg(p.Value())
		}
		parts = append(parts, col+" IN ("+strings.Join(ps, ", ")+")")
	}
	expr := "(" + strings.Join(parts, " OR ") + ")"
	if len(parts) == 0 {
		expr = "(1=0)"
	}
	if f.Negate {
		// A NULL key belongs to no mapping: the complement keeps it rather than delete it.
		return "(" + col + " IS NOT NULL AND NOT " + expr + ")"
	}
	return expr
}

// Match reports whether a row whose sharding column holds v passes the
// filter; v is a value as the driver or the binlog decoder returns it.
func (f Filter) Match(v any) (bool, error) {
	if f.All() {
		return true, nil
	}
	if v == nil {
		return false, nil
	}
	in, err := f.matchAny(v)
	if err != nil {
		return false, err
	}
	return in != f.Negate, nil
}

func (f Filter) matchAny(v any) (bool, error) {
	for _, r := range f.Ranges {
		k, err := keyFromValue(v, rangeType(r))
		if err != nil {
			return false, err
		}
		if r.Contains(k) {
			return true, nil
		}
	}
	if len(f.Arcs) > 0 {
		h, err := HashOf(v)
		if err != nil {
			return false, err
		}
		for _, a := range f.Arcs {
			if a.Contains(h) {
				return true, nil
			}
		}
	}
	for _, p := range f.Points {
		k, err := keyFromValue(v, p.Type)
		if err != nil {
			return false, err
		}
		if k.Compare(p) == 0 {
			return true, nil
		}
	}
	return false, nil
}

func rangeType(r Range) KeyType {
	if r.Lo != nil {
		return r.Lo.Type
	}
	if r.Hi != nil {
		return r.Hi.Type
	}
	return IntKey
}

func keyFromValue(v any, t KeyType) (Key, error) {
	if t == StringKey {
		b, err := textOf(v)
		return StrK(string(b)), err
	}
	switch x := v.(type) {
	case int64:
		return IntK(x), nil
	case int32:
		return IntK(int64(x)), nil
	case int16:
		return IntK(int64(x)), nil
	case int8:
		return IntK(int64(x)), nil
	case int:
		return IntK(int64(x)), nil
	case uint64:
		if x > math.MaxInt64 {
			return Key{}, fmt.Errorf("key %d does not fit a signed 64-bit integer", x)
		}
		return IntK(int64(x)), nil
	case uint32:
		return IntK(int64(x)), nil
	case uint16:
		return IntK(int64(x)), nil
	case uint8:
		return IntK(int64(x)), nil
	case []byte, string:
		b, _ := textOf(x)
		n, err := strconv.ParseInt(string(b), 10, 64)
		if err != nil {
			return Key{}, fmt.Errorf("key %q is not an integer", b)
		}
		return IntK(n), nil
	}
	return Key{}, fmt.Errorf("key of type %T cannot be compared with INT keys", v)
}

func textOf(v any) ([]byte, error) {
	switch x := v.(type) {
	case []byte:
		return x, nil
	case string:
		return []byte(x), nil
	case int64, int32, int16, int8, int, uint64, uint32, uint16, uint8, uint:
		return []byte(fmt.Sprint(x)), nil
	case Key:
		return []byte(x.String()), nil
	}
	return nil, fmt.Errorf("key of type %T has no text form", v)
}
