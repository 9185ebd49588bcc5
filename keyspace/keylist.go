package keyspace

import (
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
	for i := 0; i < len(ks); {
		j := i
		for ks[i].Type == IntKey && j+1 < len(ks) && ks[j+1].Int == ks[j].Int+1 {
			j++
		}
		switch {
		case j-i >= 2:
			parts = append(parts, strconv.FormatInt(ks[i].Int, 10)+".."+strconv.FormatInt(ks[j].Int, 10))
		default:
			for k := i; k <= j; k++ {
				parts = append(parts, ks[k].String())
			}
		}
		i = j + 1
	}
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
