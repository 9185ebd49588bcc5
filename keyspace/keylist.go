package keyspace

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// MaxRunKeys bounds what one A..B of a key list expands to: a run is
// shorthand for tenants that exist, and a million of them is no typo's
// worth of memory.
const MaxRunKeys = 1_000_000

// ParseKeyList parses the keys of a --keys list, each a key or, for INT
// keys, a run A..B (both included), sorted and without repeats.
func ParseKeyList(in []string, t KeyType) ([]Key, error) {
	var keys []Key
	for _, s := range in {
		if strings.TrimSpace(s) == "" {
			return nil, fmt.Errorf("--keys has an empty key")
		}
		if lo, hi, ok := strings.Cut(s, ".."); ok && t == IntKey {
			a, err := ParseKey(lo, t)
			if err != nil {
				return nil, fmt.Errorf("--keys %s: %v", s, err)
			}
			b, err := ParseKey(hi, t)
			if err != nil {
				return nil, fmt.Errorf("--keys %s: %v", s, err)
			}
			if a.Int > b.Int || uint64(b.Int-a.Int) >= MaxRunKeys {
				return nil, fmt.Errorf("--keys %s: a run A..B needs A <= B and at most %d keys", s, MaxRunKeys)
			}
			for v := a.Int; ; v++ {
				keys = append(keys, IntK(v))
				if v == b.Int {
					break
				}
			}
			continue
		}
		k, err := ParseKey(s, t)
		if err != nil {
			return nil, fmt.Errorf("--keys: %v", err)
		}
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Compare(keys[j]) < 0 })
	out := keys[:0]
	for i, k := range keys {
		if i == 0 || k.Compare(keys[i-1]) != 0 {
			out = append(out, k)
		}
	}
	return out, nil
}

// KeyListArg renders keys as one --keys argument that ParseKeyList reads
// back: INT keys in order, three or more consecutive ones as a run A..B (a
// merged LIST shard's hundreds of tenants stay one short argument); quoted
// for a POSIX shell when a key holds anything but letters, digits and _.-:
// so the command runs as printed.
func KeyListArg(keys []Key) string {
	ks := append([]Key(nil), keys...)
	sort.Slice(ks, func(i, j int) bool { return ks[i].Compare(ks[j]) < 0 })
	var parts []string
	eachRun(ks, func(i, j int) {
		if j-i >= 2 {
			parts = append(parts, strconv.FormatInt(ks[i].Int, 10)+".."+strconv.FormatInt(ks[j].Int, 10))
			return
		}
		for k := i; k <= j; k++ {
			parts = append(parts, ks[k].String())
		}
	})
	return ShellWord(strings.Join(parts, ","))
}

var plainWord = regexp.MustCompile(`^[A-Za-z0-9_.,:/-]+$`)

// ShellWord quotes s for a POSIX shell unless it needs none.
func ShellWord(s string) string {
	if plainWord.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// A list of keys in a plan file: a key move's tenants, a LIST merge's every
// key, in the row filters of each copied table and the shard-map changes of
// each phase. A merge of a 50,000-tenant shard listed them as one JSON
// object per key in a dozen places (80 MB of plan file, saved inside the
// blackout); INT keys are written as one string of runs A..B, the form
// --keys reads, but in the list's own order.

// KeyList is a list of keys whose JSON is compact: INT keys as one string
// of comma-separated runs in their order ("1..500,502,-7..-3"), any other
// list as an array of keys. Both forms are read.
type KeyList []Key

// MarshalJSON writes INT keys as runs, others as an array of keys.
func (l KeyList) MarshalJSON() ([]byte, error) {
	for _, k := range l {
		if k.Type != IntKey {
			return json.Marshal([]Key(l))
		}
	}
	var b strings.Builder
	eachRun(l, func(i, j int) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(l[i].Int, 10))
		if j > i {
			b.WriteString("..")
			b.WriteString(strconv.FormatInt(l[j].Int, 10))
		}
	})
	return json.Marshal(b.String())
}

// UnmarshalJSON reads either form.
func (l *KeyList) UnmarshalJSON(raw []byte) error {
	var runs string
	if err := json.Unmarshal(raw, &runs); err != nil {
		var ks []Key
		if err := json.Unmarshal(raw, &ks); err != nil {
			return err
		}
		*l = ks
		return nil
	}
	*l = nil
	if runs == "" {
		return nil
	}
	for _, run := range strings.Split(runs, ",") {
		lo, hi, isRun := strings.Cut(run, "..")
		a, err := strconv.ParseInt(lo, 10, 64)
		if err != nil {
			return fmt.Errorf("key list %q: %w", run, err)
		}
		b := a
		if isRun {
			if b, err = strconv.ParseInt(hi, 10, 64); err != nil || b < a {
				return fmt.Errorf("key list %q: not a run of keys LO..HI", run)
			}
		}
		for k := a; ; k++ {
			*l = append(*l, IntK(k))
			if k == b {
				break
			}
		}
	}
	return nil
}

// KeysFlag names moved keys as a key move takes them: LIST points and
// INT keys with --keys (runs A..B), one range of any key type with --range.
// A range open at either end has no flag: ok is false.
func KeysFlag(f Filter) (flag string, ok bool) {
	if len(f.Points) > 0 {
		return "--keys " + KeyListArg(f.Points), true
	}
	if len(f.Ranges) == 0 || len(f.Arcs) > 0 {
		return "", false
	}
	for _, r := range f.Ranges {
		if r.Lo == nil || r.Hi == nil {
			return "", false
		}
	}
	if len(f.Ranges) == 1 || len(f.Ranges) > 0 && f.Ranges[0].Lo.Type != IntKey {
		r := f.Ranges[0]
		return "--range " + ShellWord(r.Lo.String()+":"+r.Hi.String()), true
	}
	var parts []string
	for _, r := range f.Ranges {
		last := r.Hi.Int - 1 // a key move's ranges from --keys are [K, K+1) joined
		switch {
		case last == r.Lo.Int:
			parts = append(parts, r.Lo.String())
		default:
			parts = append(parts, fmt.Sprintf("%d..%d", r.Lo.Int, last))
		}
	}
	return "--keys " + strings.Join(parts, ","), true
}
