package move

// A key move: some of a shard's keys (LIST points, or a sub-range of a RANGE
// mapping) move with their rows to another shard, existing (--into) or new
// (--to). It is the pipeline of a whole-shard move with a key filter: only
// the moving keys' rows are copied, tailed, checksummed, fenced and cleaned
// up; every other key of both shards stays writable throughout.

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/operation"
	"github.com/shardctl/shardctl/pipeline"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
)

// KeysRequest is what the operator asked for: Keys or Range, and Into or To.
type KeysRequest struct {
	ShardID int
	Keys    []string // LIST points; on a RANGE map each key K is [K, K+1)
	Range   string   // RANGE: "LO:HI", LO included, HI excluded
	Into    int      // an existing shard that receives the keys
	To      dbutil.Addr
	Schema  string // the new shard's schema (To); "" = <source schema>_<first key>
	// Shared leaves the new shard of To shared; by default it is marked
	// dedicated at cutover (an isolated tenant: rebalance leaves it alone).
	Shared  bool
	Options plans.Options
}

var badName = regexp.MustCompile(`[^A-Za-z0-9_]`)

// PlanKeys builds and preflights a key move plan. It changes nothing.
// Long on purpose: keys into an existing shard and keys to a new shard share
// every field but the target, its location and what an abort removes, and
// read best side by side.
func PlanKeys(ctx context.Context, env pipeline.Env, req KeysRequest) (*plans.Plan, error) {
	if (len(req.Keys) == 0) == (req.Range == "") {
		return nil, fmt.Errorf("%w: give the keys that move: --keys K1,K2,... or --range LO:HI", shardmap.ErrBadInput)
	}
	if (req.Into > 0) == (req.To.Host != "") {
		return nil, fmt.Errorf("%w: give where the keys go: --into SHARD (an existing shard) or --to HOST:PORT (a new shard of their own)", shardmap.ErrBadInput)
	}
	if req.Into == req.ShardID {
		return nil, fmt.Errorf("%w: the keys are on shard %d already: --into names the shard that receives them", shardmap.ErrBadInput, req.ShardID)
	}
	env = pipeline.WithPools(env)
	defer env.Pools.Close()
	m, src, err := pipeline.Shard(ctx, env, req.ShardID)
	if err != nil {
		return nil, err
	}
	f, err := shardFunction(m, req.ShardID)
	if err != nil {
		return nil, err
	}
	var dst shardmap.Location
	target := shardmap.NewShard
	if req.Into > 0 {
		if _, dst, err = pipeline.Shard(ctx, env, req.Into); err != nil {
			return nil, err
		}
		for _, mp := range m.ShardMappings(req.Into) {
			if mp.FuncID != f.ID {
				return nil, fmt.Errorf("%w: shard %d holds keys of partition function %d, and shard %d's keys are of function %s: a key moves only between shards of one function", shardmap.ErrBadInput, req.Into, mp.FuncID, req.ShardID, f.Name)
			}
			if err := notOffline(req.Into, mp); err != nil {
				return nil, err
			}
		}
		target = req.Into
	}
	var mv moving
	switch f.Type {
	case shardmap.List:
		mv, err = listKeys(m, f, req)
	case shardmap.Range:
		mv, err = rangeKeys(m, f, req, target)
	default:
		err = fmt.Errorf("%w: shard %d is mapped by %s function %s, whose keys are spread by their hash: split it with --at-hash instead", shardmap.ErrBadInput, req.ShardID, f.Type, f.Name)
	}
	if err != nil {
		return nil, err
	}
	ts, err := pipeline.Inspect(ctx, env, m, src)
	if err != nil {
		return nil, err
	}
	// Keys that go to a new shard of their own split the shard by a key set.
	op := operation.Split
	if req.Into > 0 {
		op = operation.MoveKeys
	}
	p := plans.New(op, "")
	p.Offline, p.Cutover, p.Abort = mv.offline, mv.cutover, mv.abort
	p.Args = map[string]string{"shard": fmt.Sprint(req.ShardID), "keys": mv.describe}
	to := plans.Endpoint{ShardID: req.Into, Host: dst.Host, Port: dst.Port, Schema: dst.Schema}
	if req.Into > 0 {
		p.Args["into"] = fmt.Sprint(req.Into)
		p.Summary = fmt.Sprintf("move %s of shard %d (%s) into shard %d (%s on %s)", mv.describe, req.ShardID, src.Schema, req.Into, dst.Schema, dst.Addr())
		pipeline.Skeleton(env, p, src, to, req.Options, req.ShardID, req.Into)
	} else {
		if req.Schema == "" {
			req.Schema = badName.ReplaceAllString(src.Schema+"_"+mv.first, "_")
		}
		if err := dbutil.CheckSchemaName(req.Schema); err != nil {
			return nil, fmt.Errorf("%w: the new shard's schema: %v (give --schema NAME)", shardmap.ErrBadInput, err)
		}
		p.Args["to"] = req.To.String()
		p.Summary = fmt.Sprintf("move %s of shard %d (%s) to a new shard on %s (%s)", mv.describe, req.ShardID, src.Schema, req.To, req.Schema)
		if !req.Shared && m.Format >= 2 {
			// In the cutover's transaction: the shard is dedicated from the
			// moment it holds the keys, never open to rebalance in between.
			p.Cutover = append(p.Cutover, shardmap.Change{Op: shardmap.OpSetPolicy, ShardID: shardmap.NewShard, Policy: shardmap.PolicyDedicated})
			p.Args["policy"] = shardmap.PolicyDedicated
			p.Summary += ", marked dedicated (rebalance leaves it alone; --no-dedicated to keep it shared)"
		}
		to = plans.Endpoint{ShardID: shardmap.NewShard, Host: req.To.Host, Port: req.To.Port, Schema: req.Schema}
		pipeline.Skeleton(env, p, src, to, req.Options, req.ShardID)
		// The new shard's location is registered by the create step, as the plan's first change.
		p.Prepare = []shardmap.Change{{Op: shardmap.OpAddLocation, ShardID: shardmap.NewShard, Host: req.To.Host, Port: req.To.Port, Schema: req.Schema}}
		p.Abort = append(p.Abort, shardmap.Change{Op: shardmap.OpRemoveLocation, ShardID: shardmap.NewShard})
		p.DropTargetSchema = true
	}
	for _, t := range ts {
		if !t.Sharded {
			if req.Into == 0 {
				p.Copy = append(p.Copy, t) // a new shard gets its own copy of the global tables
			}
			continue
		}
		if tf, _, _ := m.TableFunction(t.Name); tf.ID != f.ID {
			return nil, fmt.Errorf("%w: table %s is sharded by function %s, not %s; a shard's tables must share one function to move some of its keys", shardmap.ErrBadInput, t.Name, tf.Name, f.Name)
		}
		t.Filter = mv.filter
		t.Filter.Column = t.ShardColumn
		p.Copy = append(p.Copy, t)
		p.Fence = append(p.Fence, plans.FenceTable{Name: t.Name, Filter: t.Filter})
		p.Cleanup = append(p.Cleanup, t)
		if req.Into > 0 {
			p.AbortTarget = append(p.AbortTarget, t) // an abort deletes the moving keys' rows there, never a table
		}
	}
	if len(p.Fence) == 0 {
		return nil, fmt.Errorf("%w: shard %d's schema has no table sharded by %s", shardmap.ErrBadInput, req.ShardID, f.Name)
	}
	if err := countKeys(ctx, env, src, p, mv.filter); err != nil {
		return nil, err
	}
	if err := pipeline.Finish(ctx, env, p); err != nil {
		return nil, err
	}
	return p, nil
}

// countKeys counts each moving key's rows over the sharded tables, for the
// dry run, and makes each table's estimate the rows that move rather than
// the table's: LIST points by one GROUP BY per table (a rebalance moves
// thousands of tenants at once: a statement per key was most of its dry
// run), ranges by one index range read per range and table.
func countKeys(ctx context.Context, env pipeline.Env, src shardmap.Location, p *plans.Plan, moving keyspace.Filter) error {
	db, err := env.Pools.DB(ctx, src.Addr())
	if err != nil {
		return err
	}
	points := make(map[string]int64, len(moving.Points))
	ranges := make([]int64, len(moving.Ranges))
	for i := range p.Copy {
		t := &p.Copy[i]
		if !t.Sharded {
			continue
		}
		var moved int64
		fail := func(err error) error {
			return fmt.Errorf("count the moving keys' rows of shard %d, table %s.%s: %w", src.ShardID, src.Schema, t.Name, err)
		}
		if len(moving.Points) > 0 {
			f := keyspace.Filter{Column: t.ShardColumn, Points: moving.Points}
			where, args := f.SQL(dbutil.QuoteIdent)
			col := dbutil.QuoteIdent(t.ShardColumn)
			rows, err := db.QueryContext(ctx, "SELECT "+col+", COUNT(*) FROM "+dbutil.Table(src.Schema, t.Name)+" WHERE "+where+" GROUP BY "+col, args...)
			if err != nil {
				return fail(err)
			}
			for rows.Next() {
				var k string
				var n int64
				if err := rows.Scan(&k, &n); err != nil {
					rows.Close()
					return fail(err)
				}
				points[k] += n
				moved += n
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return fail(err)
			}
		}
		for j, r := range moving.Ranges {
			f := keyspace.Filter{Column: t.ShardColumn, Ranges: []keyspace.Range{r}}
			where, args := f.SQL(dbutil.QuoteIdent)
			var n int64
			if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+dbutil.Table(src.Schema, t.Name)+" WHERE "+where, args...).Scan(&n); err != nil {
				return fail(err)
			}
			ranges[j] += n
			moved += n
		}
		if t.EstRows > 0 {
			t.EstBytes = t.EstBytes * moved / t.EstRows
		}
		t.EstRows = moved
	}
	for _, k := range moving.Points {
		p.MovingKeys = append(p.MovingKeys, plans.KeyRows{Key: k.String(), Rows: points[k.String()]})
	}
	for j, r := range moving.Ranges {
		p.MovingKeys = append(p.MovingKeys, plans.KeyRows{Key: r.String(), Rows: ranges[j]})
	}
	return nil
}

// shardFunction is the one partition function whose keys shard id holds.
func shardFunction(m *shardmap.Map, id int) (shardmap.Function, error) {
	fn, n := 0, 0 // one scan, no copy: a LIST shard can own 100,000 points
	for i := range m.Mappings {
		mp := &m.Mappings[i]
		if mp.ShardID != id {
			continue
		}
		if n > 0 && mp.FuncID != fn {
			return shardmap.Function{}, fmt.Errorf("%w: shard %d holds keys of more than one partition function; move its keys one function at a time is not supported", shardmap.ErrBadInput, id)
		}
		fn, n = mp.FuncID, n+1
	}
	if n == 0 {
		return shardmap.Function{}, fmt.Errorf("%w: shard %d has no mappings in the shard map; it has no keys to move", shardmap.ErrBadInput, id)
	}
	return m.FunctionByID(fn)
}

// moving is what a key move takes: the row filter and the shard-map changes
// of each phase.
type moving struct {
	filter                  keyspace.Filter
	offline, cutover, abort []shardmap.Change
	describe, first         string
}

// listKeys: each key must be a list point of the source shard; the points
// go offline, are re-pointed at cutover and come online there.
func listKeys(m *shardmap.Map, f shardmap.Function, req KeysRequest) (moving, error) {
	var mv moving
	if req.Range != "" {
		return mv, fmt.Errorf("%w: %s is a LIST function: its keys are points, not ranges; give --keys K1,K2 (the tenants that move)", shardmap.ErrBadInput, f.Name)
	}
	keys, err := parseKeys(req.Keys, f)
	if err != nil {
		return mv, err
	}
	// One pass over the map for every key: a lookup per key over every
	// point was quadratic in the tenants a rebalance moves.
	want := make(map[string]int, len(keys))
	for i, k := range keys {
		want[k.String()] = i
	}
	found := make([]*shardmap.Mapping, len(keys))
	for i := range m.Mappings {
		mp := &m.Mappings[i]
		if mp.FuncID != f.ID || mp.Kind != shardmap.List || mp.Point == nil {
			continue
		}
		if j, ok := want[mp.Point.String()]; ok {
			found[j] = mp
		}
	}
	for i, k := range keys {
		mp := found[i]
		switch {
		case mp == nil:
			return mv, fmt.Errorf("%w: key %s is not in %s's list: there are no rows of it to move (add it where it belongs with 'shardctl shardmap add-point')", shardmap.ErrBadInput, k, f.Name)
		case mp.ShardID != req.ShardID:
			return mv, fmt.Errorf("%w: key %s belongs to shard %d, not shard %d: give --shard %d", shardmap.ErrBadInput, k, mp.ShardID, req.ShardID, mp.ShardID)
		}
		if err := notOffline(req.ShardID, *mp); err != nil {
			return mv, err
		}
		mv.filter.Points = append(mv.filter.Points, k)
	}
	// The points change together, each phase one statement.
	ref := shardmap.Ref{FuncID: f.ID, Kind: shardmap.List, Points: mv.filter.Points}
	mv.offline = []shardmap.Change{{Op: shardmap.OpSetStatus, Ref: ref, Status: shardmap.Offline}}
	mv.cutover = []shardmap.Change{{Op: shardmap.OpRepoint, Ref: ref, ShardID: target(req)}, {Op: shardmap.OpSetStatus, Ref: ref, Status: shardmap.Online}}
	mv.abort = []shardmap.Change{{Op: shardmap.OpSetStatus, Ref: ref, Status: shardmap.Online}}
	mv.describe = "keys " + keyspace.Runs(keys, 4) // the full list is in the plan's filter and moving keys
	mv.first = keys[0].String()
	return mv, nil
}

// notOffline refuses a key move into or out of a mapping set offline (by
// hand, for maintenance, or by a plan that stopped): the move would bring
// the keys online on the receiving shard at its cutover, ending an outage
// someone chose, or route them to a shard that is out of service. A DBA
// brings the shard back first (docs/move.md).
func notOffline(id int, mp shardmap.Mapping) error {
	if mp.Status != shardmap.Offline {
		return nil
	}
	return fmt.Errorf("%w: shard %d's mapping %s is offline (set so by hand, or by a plan that stopped: 'shardctl plan list' shows those): a key move brings its keys online at the receiving shard at cutover; bring the shard online first ('shardctl shardmap set-status --shard %d online'), then move the keys", shardmap.ErrBadInput, id, mp, id)
}

func target(req KeysRequest) int {
	if req.Into > 0 {
		return req.Into
	}
	return shardmap.NewShard
}

// parseKeys parses, sorts and de-duplicates the keys of --keys (runs A..B
// of INT keys expanded).
func parseKeys(in []string, f shardmap.Function) ([]keyspace.Key, error) {
	keys, err := keyspace.ParseKeyList(in, f.KeyType)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", shardmap.ErrBadInput, err)
	}
	return keys, nil
}

// rangeKeys: the moving ranges (--range LO:HI, or [K, K+1) for each of
// --keys) must each lie inside one of the source shard's ranges. Each is
// split out of its mapping and taken offline; at cutover it is re-pointed,
// brought online and merged with a neighbouring range of the destination;
// an abort merges the splits back.
func rangeKeys(m *shardmap.Map, f shardmap.Function, req KeysRequest, dest int) (moving, error) {
	var mv moving
	rs, err := movingRanges(f, req)
	if err != nil {
		return mv, err
	}
	mps := m.MappingsOf(f.ID)
	owner := func(i int) int { // the shard of mps[i] after the cutover, -2 past either end
		if i < 0 || i >= len(mps) {
			return -2
		}
		return mps[i].ShardID
	}
	var created []keyspace.Key // bounds the offline changes add, undone by abort
	var merges []shardmap.Change
	for _, r := range rs {
		i := containing(mps, *r.Lo)
		if i < 0 || mps[i].ShardID != req.ShardID || (mps[i].Upper != nil && r.Hi.Compare(*mps[i].Upper) > 0) {
			return mv, fmt.Errorf("%w: %s is not inside one of shard %d's ranges (%s): a key move takes keys of the shard it names", shardmap.ErrBadInput, r, req.ShardID, ranges(m.ShardMappings(req.ShardID)))
		}
		mp := mps[i]
		if err := notOffline(req.ShardID, mp); err != nil {
			return mv, err
		}
		lo := *r.Lo
		if lo.Compare(*mp.Lower) != 0 {
			mv.offline = append(mv.offline, shardmap.Change{Op: shardmap.OpSplitRange, Ref: shardmap.Ref{FuncID: f.ID}, At: &lo})
			created = append(created, lo)
		}
		if mp.Upper == nil || r.Hi.Compare(*mp.Upper) != 0 {
			hi := *r.Hi
			mv.offline = append(mv.offline, shardmap.Change{Op: shardmap.OpSplitRange, Ref: shardmap.Ref{FuncID: f.ID}, At: &hi})
			created = append(created, hi)
		}
		ref := shardmap.Ref{FuncID: f.ID, Kind: shardmap.Range, Lower: &lo}
		mv.offline = append(mv.offline, shardmap.Change{Op: shardmap.OpSetStatus, Ref: ref, Status: shardmap.Offline})
		mv.cutover = append(mv.cutover, shardmap.Change{Op: shardmap.OpRepoint, Ref: ref, ShardID: dest}, shardmap.Change{Op: shardmap.OpSetStatus, Ref: ref, Status: shardmap.Online})
		mv.abort = append(mv.abort, shardmap.Change{Op: shardmap.OpSetStatus, Ref: ref, Status: shardmap.Online})
		if dest == shardmap.NewShard {
			continue // a new shard has no neighbouring range to merge with
		}
		// Merge with a neighbouring range of the destination, so its keys
		// stay one mapping: the range below when the moving range starts at
		// the source mapping's lower bound, the range above when it ends at
		// its upper bound (moving ranges are never adjacent: movingRanges
		// joins them).
		if lo.Compare(*mp.Lower) == 0 && owner(i-1) == dest {
			merges = append(merges, shardmap.Change{Op: shardmap.OpMergeRange, Ref: ref})
		}
		if mp.Upper != nil && r.Hi.Compare(*mp.Upper) == 0 && owner(i+1) == dest {
			hi := *r.Hi
			merges = append(merges, shardmap.Change{Op: shardmap.OpMergeRange, Ref: shardmap.Ref{FuncID: f.ID, Kind: shardmap.Range, Lower: &hi}})
		}
	}
	// Merging after every re-point: a merge checks both ranges are one shard's.
	mv.cutover = append(mv.cutover, merges...)
	sort.Slice(created, func(i, j int) bool { return created[i].Compare(created[j]) > 0 })
	for i := range created {
		if i > 0 && created[i].Compare(created[i-1]) == 0 {
			continue
		}
		at := created[i]
		mv.abort = append(mv.abort, shardmap.Change{Op: shardmap.OpMergeRange, Ref: shardmap.Ref{FuncID: f.ID, Kind: shardmap.Range, Lower: &at}})
	}
	mv.filter.Ranges = rs
	var parts []string
	for _, r := range rs {
		parts = append(parts, r.String())
	}
	mv.describe = "keys " + strings.Join(parts, " ")
	mv.first = rs[0].Lo.String()
	return mv, nil
}

// movingRanges are the ranges --range or --keys name, sorted, adjacent keys
// joined, overlaps refused.
func movingRanges(f shardmap.Function, req KeysRequest) ([]keyspace.Range, error) {
	var rs []keyspace.Range
	if req.Range != "" {
		lo, hi, ok := strings.Cut(req.Range, ":")
		if !ok || strings.TrimSpace(lo) == "" || strings.TrimSpace(hi) == "" {
			return nil, fmt.Errorf("%w: --range %q: give LO:HI (LO included, HI excluded)", shardmap.ErrBadInput, req.Range)
		}
		l, err := keyspace.ParseKey(lo, f.KeyType)
		if err != nil {
			return nil, fmt.Errorf("%w: --range: %v", shardmap.ErrBadInput, err)
		}
		h, err := keyspace.ParseKey(hi, f.KeyType)
		if err != nil {
			return nil, fmt.Errorf("%w: --range: %v", shardmap.ErrBadInput, err)
		}
		if l.Compare(h) >= 0 {
			return nil, fmt.Errorf("%w: --range %s: LO must be below HI (HI is excluded)", shardmap.ErrBadInput, req.Range)
		}
		return []keyspace.Range{{Lo: &l, Hi: &h}}, nil
	}
	if f.KeyType != keyspace.IntKey {
		return nil, fmt.Errorf("%w: %s is a RANGE function of STRING keys: a single key has no next key to end its range at; give --range LO:HI", shardmap.ErrBadInput, f.Name)
	}
	keys, err := parseKeys(req.Keys, f)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		if k.Int == 1<<63-1 {
			return nil, fmt.Errorf("%w: key %s is the largest INT key: give --range %s:... instead", shardmap.ErrBadInput, k, k)
		}
		lo, hi := k, keyspace.IntK(k.Int+1)
		if n := len(rs); n > 0 && rs[n-1].Hi.Compare(lo) == 0 {
			rs[n-1].Hi = &hi // adjacent keys move as one range
			continue
		}
		rs = append(rs, keyspace.Range{Lo: &lo, Hi: &hi})
	}
	return rs, nil
}

// containing is the index of the range mapping that holds k, or -1.
func containing(mps []shardmap.Mapping, k keyspace.Key) int {
	for i, mp := range mps {
		if mp.Kind == shardmap.Range && (keyspace.Range{Lo: mp.Lower, Hi: mp.Upper}).Contains(k) {
			return i
		}
	}
	return -1
}

func ranges(mps []shardmap.Mapping) string {
	var s []string
	for _, mp := range mps {
		s = append(s, mp.String())
	}
	return strings.Join(s, " ")
}
