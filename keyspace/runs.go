package keyspace

import (
	"fmt"
	"math"
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
	eachRun(keys, func(i, j int) {
		if i == j {
			runs = append(runs, keys[i].String())
		} else {
			runs = append(runs, keys[i].String()+"-"+keys[j].String())
		}
	})
	s := strings.Join(runs, ",")
	if len(runs) > maxRuns {
		s = strings.Join(runs[:maxRuns], ",") + ",…"
	}
	if len(keys) > 1 {
		s += fmt.Sprintf(" (%d keys)", len(keys))
	}
	return s
}

// eachRun calls fn(i, j) for each run keys[i..j] of consecutive INT keys, in
// the keys' order (any other key is a run of its own): the one run finder
// behind Runs, KeyListArg and a KeyList's JSON.
func eachRun(keys []Key, fn func(i, j int)) {
	for i := 0; i < len(keys); {
		j := i
		for keys[j].Type == IntKey && j+1 < len(keys) && keys[j+1].Type == IntKey && keys[j].Int != math.MaxInt64 && keys[j+1].Int == keys[j].Int+1 {
			j++
		}
		fn(i, j)
		i = j + 1
	}
}
