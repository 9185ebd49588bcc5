package keyspace

import (
	"fmt"
	"strings"
)

// Runs renders keys, sorted ascending, as runs of consecutive INT keys
// ("1-4000,4102,5000-5020"): the first maxRuns runs, then "…", and with more
// than one key their count ("(5021 keys)"). A shard's thousands of tenants, or
// a rebalance proposal's, stay one short line; the full list lives in the
// plan and in -o json. One renderer for status, shardmap show, the shard-map
// changes a plan prints, key moves and rebalance.
func Runs(keys []Key, maxRuns int) string {
	var runs []string
	var lo, hi *Key
	flush := func() {
		if lo == nil {
			return
		}
		if lo.Compare(*hi) == 0 {
			runs = append(runs, lo.String())
		} else {
			runs = append(runs, lo.String()+"-"+hi.String())
		}
		lo, hi = nil, nil
	}
	for i := range keys {
		k := &keys[i]
		if hi != nil && k.Type == IntKey && hi.Type == IntKey && k.Int == hi.Int+1 {
			hi = k
			continue
		}
		flush()
		lo, hi = k, k
	}
	flush()
	s := strings.Join(runs, ",")
	if len(runs) > maxRuns {
		s = strings.Join(runs[:maxRuns], ",") + ",…"
	}
	if len(keys) > 1 {
		s += fmt.Sprintf(" (%d keys)", len(keys))
	}
	return s
}
