// Package split plans splitting a shard: the upper part of a RANGE mapping
// ([at, high)), or a new arc of the HASH ring, moves to a new shard on another
// server (or another schema). Only the moving rows are copied, tailed, fenced
// and later deleted from the source; keys that stay remain writable throughout.
package split

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/operation"
	"github.com/shardctl/shardctl/pipeline"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
	"github.com/shardctl/shardctl/tables"
)

// Request is what the operator asked for.
type Request struct {
	ShardID int
	At      string // RANGE: the first key that moves; "" = the key that halves the shard's rows
	AtHash  string // HASH: the new ring point; "" = the midpoint of the shard's arc
	To      dbutil.Addr
	Schema  string // new shard's schema; "" = <source schema>_<at>
	Options plans.Options
}

var badName = regexp.MustCompile(`[^A-Za-z0-9_]`)

// Plan builds and preflights a split plan. It changes nothing.
// Long on purpose: RANGE and HASH differ only in how the moving keys and
// the new mappings are chosen; the rest is one sequence of plan fields.
func Plan(ctx context.Context, env pipeline.Env, req Request) (*plans.Plan, error) {
	env = pipeline.WithPools(env)
	defer env.Pools.Close()
	m, loc, err := pipeline.Shard(ctx, env, req.ShardID)
	if err != nil {
		return nil, err
	}
	mappings := m.ShardMappings(req.ShardID)
	// A LIST shard has a point per tenant: what it needs is the key set, not
	// its mapping count (issue 53).
	for _, mp := range mappings {
		if f, err := m.FunctionByID(mp.FuncID); err == nil && f.Type == shardmap.List {
			return nil, fmt.Errorf("%w: shard %d is mapped by %s function %s (%d keys): a LIST shard splits by a key set: give --keys K1,K2 (the tenants that move to the new shard)", shardmap.ErrBadInput, req.ShardID, f.Type, f.Name, len(mappings))
		}
	}
	if len(mappings) != 1 {
		return nil, fmt.Errorf("%w: shard %d has %d mappings; split works on a shard with exactly one range or ring point", shardmap.ErrBadInput, req.ShardID, len(mappings))
	}
	mp := mappings[0]
	f, err := m.FunctionByID(mp.FuncID)
	if err != nil {
		return nil, err
	}
	if f.Type != shardmap.Range && f.Type != shardmap.Hash {
		return nil, fmt.Errorf("%w: shard %d is mapped by %s function %s: split works on RANGE and HASH shards", shardmap.ErrBadInput, req.ShardID, f.Type, f.Name)
	}
	ts, err := pipeline.Inspect(ctx, env, m, loc)
	if err != nil {
		return nil, err
	}
	p := plans.New(operation.Split, "")
	var moving keyspace.Filter
	switch f.Type {
	case shardmap.Range:
		if req.AtHash != "" {
			return nil, fmt.Errorf("%w: --at-hash is for HASH shards, and shard %d is mapped by RANGE function %s: give --at KEY (or neither, for the median)", shardmap.ErrBadInput, req.ShardID, f.Name)
		}
		at, err := chooseAt(ctx, env, loc, ts, mp, f, req.At)
		if err != nil {
			return nil, err
		}
		moving = keyspace.Filter{Ranges: []keyspace.Range{{Lo: &at, Hi: mp.Upper}}}
		upper := shardmap.Ref{FuncID: f.ID, Kind: shardmap.Range, Lower: &at}
		p.Offline = []shardmap.Change{
			{Op: shardmap.OpSplitRange, Ref: shardmap.Ref{FuncID: f.ID}, At: &at},
			{Op: shardmap.OpSetStatus, Ref: upper, Status: shardmap.Offline},
		}
		p.Cutover = []shardmap.Change{{Op: shardmap.OpRepoint, Ref: upper, ShardID: shardmap.NewShard}, {Op: shardmap.OpSetStatus, Ref: upper, Status: shardmap.Online}}
		p.Abort = []shardmap.Change{{Op: shardmap.OpSetStatus, Ref: upper, Status: shardmap.Online}, {Op: shardmap.OpMergeRange, Ref: upper}}
		p.Args["at"] = at.String()
		p.Summary = fmt.Sprintf("split shard %d (%s) at %s: %s moves to a new shard on %s", req.ShardID, loc.Schema, at, keyspace.Range{Lo: &at, Hi: mp.Upper}, req.To)
		if req.Schema == "" {
			req.Schema = badName.ReplaceAllString(fmt.Sprintf("%s_%s", loc.Schema, at), "_")
		}
	case shardmap.Hash:
		if req.At != "" {
			return nil, fmt.Errorf("%w: --at is for RANGE shards, and shard %d is mapped by HASH function %s: give --at-hash MD5 (or neither, for the arc's midpoint)", shardmap.ErrBadInput, req.ShardID, f.Name)
		}
		var points []string
		for _, o := range m.MappingsOf(f.ID) {
			points = append(points, o.Hash)
		}
		arc := keyspace.ArcOf(points, mp.Hash)
		q := req.AtHash
		if q == "" {
			q = keyspace.Midpoint(arc)
		}
		if !keyspace.ValidHash(q) {
			return nil, fmt.Errorf("%w: --at-hash %q is not a 32-digit lowercase hex MD5", shardmap.ErrBadInput, q)
		}
		if q == mp.Hash || !arc.Contains(q) || q == arc.Upto {
			return nil, fmt.Errorf("%w: ring point %s is not strictly inside shard %d's arc (%s, %s]", shardmap.ErrBadInput, q, req.ShardID, arc.After, arc.Upto)
		}
		moving = keyspace.Filter{Arcs: []keyspace.Arc{{After: q, Upto: arc.Upto}}}
		ref := shardmap.Ref{FuncID: f.ID, Kind: shardmap.Hash, Hash: q}
		p.Offline = []shardmap.Change{{Op: shardmap.OpAddHashPoint, Ref: ref, ShardID: req.ShardID, Status: shardmap.Offline}}
		p.Cutover = []shardmap.Change{{Op: shardmap.OpRepoint, Ref: ref, ShardID: shardmap.NewShard}, {Op: shardmap.OpSetStatus, Ref: ref, Status: shardmap.Online}}
		p.Abort = []shardmap.Change{{Op: shardmap.OpRemoveMapping, Ref: ref}}
		p.Args["at_hash"] = q
		p.Summary = fmt.Sprintf("split shard %d (%s) at ring point %s: arc (%s, %s] moves to a new shard on %s", req.ShardID, loc.Schema, q, q, arc.Upto, req.To)
		if req.Schema == "" {
			req.Schema = fmt.Sprintf("%s_%s", loc.Schema, q[:8])
		}
	}
	p.Abort = append(p.Abort, shardmap.Change{Op: shardmap.OpRemoveLocation, ShardID: shardmap.NewShard})
	if err := dbutil.CheckSchemaName(req.Schema); err != nil {
		return nil, fmt.Errorf("%w: the new shard's schema: %v (give --schema NAME)", shardmap.ErrBadInput, err)
	}
	pipeline.Skeleton(env, p, loc, plans.Endpoint{ShardID: shardmap.NewShard, Host: req.To.Host, Port: req.To.Port, Schema: req.Schema}, req.Options, req.ShardID)
	p.Args["shard"], p.Args["to"] = fmt.Sprint(req.ShardID), req.To.String()
	// The new shard's location is registered by the create step, as the plan's first change.
	p.Prepare = []shardmap.Change{{Op: shardmap.OpAddLocation, ShardID: shardmap.NewShard, Host: req.To.Host, Port: req.To.Port, Schema: req.Schema}}
	p.DropTargetSchema = true
	for _, t := range ts {
		if !t.Sharded {
			p.Copy = append(p.Copy, t) // global tables: a full copy in the new shard
			continue
		}
		if tf, _, _ := m.TableFunction(t.Name); tf.ID != f.ID {
			return nil, fmt.Errorf("%w: table %s is sharded by function %s, not %s; a shard's tables must share one function to split it", shardmap.ErrBadInput, t.Name, tf.Name, f.Name)
		}
		t.Filter = moving
		t.Filter.Column = t.ShardColumn
		p.Copy = append(p.Copy, t)
		p.Fence = append(p.Fence, plans.FenceTable{Name: t.Name, Filter: t.Filter})
		p.Cleanup = append(p.Cleanup, t)
	}
	if len(p.Fence) == 0 {
		return nil, fmt.Errorf("%w: shard %d's schema has no table sharded by %s", shardmap.ErrBadInput, req.ShardID, f.Name)
	}
	if err := pipeline.Finish(ctx, env, p); err != nil {
		return nil, err
	}
	return p, nil
}

// chooseAt validates --at, or picks the key that halves the shard's rows.
func chooseAt(ctx context.Context, env pipeline.Env, loc shardmap.Location, ts []tables.Table, mp shardmap.Mapping, f shardmap.Function, at string) (keyspace.Key, error) {
	r := keyspace.Range{Lo: mp.Lower, Hi: mp.Upper}
	if at != "" {
		k, err := keyspace.ParseKey(at, f.KeyType)
		if err != nil {
			return k, fmt.Errorf("%w: --at: %v", shardmap.ErrBadInput, err)
		}
		if !r.Contains(k) || k.Compare(*mp.Lower) == 0 {
			return k, fmt.Errorf("%w: --at %s must be inside shard %d's range %s and above its lower bound", shardmap.ErrBadInput, k, loc.ShardID, r)
		}
		return k, nil
	}
	// The median of the sharded column of the largest sharded table.
	var big *tables.Table
	for i := range ts {
		if ts[i].Sharded && (big == nil || ts[i].EstRows > big.EstRows) {
			big = &ts[i]
		}
	}
	if big == nil {
		return keyspace.Key{}, fmt.Errorf("%w: shard %d has no sharded table to find a median in", shardmap.ErrBadInput, loc.ShardID)
	}
	db, err := env.Pools.DB(ctx, loc.Addr()) // the planning run's pool (Plan set it)
	if err != nil {
		return keyspace.Key{}, err
	}
	flt := keyspace.Filter{Column: big.ShardColumn, Ranges: []keyspace.Range{r}}
	where, args := flt.SQL(dbutil.QuoteIdent)
	var n int64
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+dbutil.Table(loc.Schema, big.Name)+" WHERE "+where, args...).Scan(&n); err != nil {
		return keyspace.Key{}, fmt.Errorf("split: count %s.%s: %w", loc.Schema, big.Name, err)
	}
	col := dbutil.QuoteIdent(big.ShardColumn)
	var v sql.NullString
	err = db.QueryRowContext(ctx, "SELECT "+col+" FROM "+dbutil.Table(loc.Schema, big.Name)+" WHERE "+where+" ORDER BY "+col+" LIMIT 1 OFFSET ?", append(args, n/2)...).Scan(&v)
	if err != nil && err != sql.ErrNoRows {
		return keyspace.Key{}, fmt.Errorf("split: median of %s.%s: %w", big.Name, big.ShardColumn, err)
	}
	k, perr := keyspace.ParseKey(v.String, f.KeyType)
	if err == sql.ErrNoRows || perr != nil || k.Compare(*mp.Lower) == 0 {
		return keyspace.Key{}, fmt.Errorf("%w: shard %d has too few rows to halve (%d in %s): give --at", shardmap.ErrBadInput, loc.ShardID, n, big.Name)
	}
	return k, nil
}
