package rebalance

// The policy's tenant side: a LIST shard over its limit split by its keys
// (the whole chain at once), the cool-down of recently moved keys, and keys
// printed as runs.

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/shardctl/shardctl/keyspace"
)

// cooling reports whether key k moved within the cool-down.
func (p Policy) cooling(k Key) bool {
	return p.MinKeyAge > 0 && k.MovedAt != nil && p.Now.Sub(*k.MovedAt) < p.MinKeyAge
}

// splitKeys splits LIST shard s, over --max-shard-rows or
// --max-shard-bytes, by its keys: the whole chain of splits it needs in one
// proposal, each a set of keys onto a new shard on the lightest server as it
// then is. Each key over the limit is isolated alone; the others are dealt
// heaviest first onto the part with the least weight (the shard itself is
// one part and keeps the keys in their cool-down), as many parts as its
// weight needs, so every part is within the limit. left says why the shard
// stays over it, if it does (keys in their cool-down); nothing is proposed
// for a shard whose weight is one key's (a key is never divided).
// Long on purpose: choosing the measure, isolating, dealing and placing
// share the parts' weights.
func (st *state) splitKeys(s Shard, why string) (ops []Op, left string) {
	limit, unit, weight := st.p.MaxShardRows, "rows", func(k Key) int64 { return k.Rows }
	if st.p.MaxShardRows <= 0 || s.Rows <= st.p.MaxShardRows {
		limit, unit, weight = st.p.MaxShardBytes, "bytes", func(k Key) int64 { return k.Bytes }
	}
	var movable []Key
	var total, stays int64
	weighed := 0
	for _, k := range s.Keys {
		w := weight(k)
		total += w
		if w <= 0 {
			continue
		}
		weighed++
		if st.p.cooling(k) {
			stays += w
			continue
		}
		movable = append(movable, k)
	}
	if weighed < 2 {
		return nil, ""
	}
	sort.SliceStable(movable, func(i, j int) bool { return weight(movable[i]) > weight(movable[j]) })
	type part struct {
		keys       []string
		w, rows, b int64
		why        string
	}
	var parts []*part
	rest := total
	for len(movable) > 0 && weight(movable[0]) > limit && rest > weight(movable[0]) {
		k := movable[0]
		movable = movable[1:]
		rest -= weight(k)
		parts = append(parts, &part{keys: []string{k.Key}, w: weight(k), rows: k.Rows, b: k.Bytes,
			why: fmt.Sprintf("key %s holds %d %s, over --max-shard-%s %d: isolated on a shard of its own", k.Key, weight(k), unit, unit, limit)})
	}
	// The rest in n parts, the shard's own first (it keeps what is cooling).
	n := int((rest + limit - 1) / limit)
	bins := make([]*part, max(n, 1))
	for i := range bins {
		bins[i] = &part{why: why}
	}
	bins[0].w = stays
	for _, k := range movable {
		best := bins[0]
		for _, b := range bins[1:] {
			if b.w < best.w {
				best = b
			}
		}
		best.w += weight(k)
		if best != bins[0] {
			best.keys, best.rows, best.b = append(best.keys, k.Key), best.rows+k.Rows, best.b+k.Bytes
		}
	}
	parts = append(parts, bins[1:]...)
	for _, pt := range parts {
		if len(pt.keys) == 0 {
			continue
		}
		to := st.lightest("")
		st.load[s.Server] -= pt.rows
		st.load[to] += pt.rows
		st.rows[s.ID] -= pt.rows
		ops = append(ops, Op{Kind: Split, Shard: s.ID, From: s.Server, To: to, Keys: pt.keys, Rows: pt.rows, Reason: pt.why})
	}
	st.used[s.ID] = true
	if bins[0].w > limit && stays > 0 {
		left = fmt.Sprintf("and %d %s of it are keys moved within --min-key-age %s: they stay until then", stays, unit, st.p.MinKeyAge)
	}
	return ops, left
}

// KeyRuns names keys as runs of consecutive keys and a count (keyspace.Runs,
// as status prints a shard's keys): a proposal of thousands of tenants
// stays one short line; the full list is in -o json and in the plan.
func KeyRuns(keys []string) string {
	ks := make([]keyspace.Key, len(keys))
	for i, k := range keys {
		if n, err := strconv.ParseInt(k, 10, 64); err == nil {
			ks[i] = keyspace.IntK(n)
		} else {
			ks[i] = keyspace.StrK(k)
		}
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].Compare(ks[j]) < 0 })
	return keyspace.Runs(ks, 3)
}
