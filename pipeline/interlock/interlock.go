package interlock

// The safety interlocks. Plans are made and run at different times, and the
// shard map moves on in between: before anything destructive, the pipeline
// re-reads the map and refuses to remove what a live mapping owns
// (GuardRemoval), and a plan is compared with the map it was made against
// before it runs, resumes or aborts (Current).

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/shardctl/shardctl/operation"
	"github.com/shardctl/shardctl/pipeline/failure"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
	"github.com/shardctl/shardctl/tables"
)

// ErrLive marks a destructive statement refused because a live mapping owns
// what it would remove. Nothing was removed.
var ErrLive = errors.New("owned by a live shard")

// ErrStale marks a plan whose shards moved or changed keys since it was made.
var ErrStale = fmt.Errorf("%w: stale plan", failure.ErrRefused)

// GuardRemoval re-reads the shard map and refuses (ErrLive) when a shard
// located at `at` (server and schema) owns the schema (t == nil: DROP
// DATABASE) or any row t.Filter selects in table t (a chunked DELETE).
// Callers run it right before the statement, in the same step.
func GuardRemoval(ctx context.Context, store *shardmap.Store, at plans.Endpoint, t *tables.Table) error {
	m, err := store.Load(ctx)
	if err != nil {
		return fmt.Errorf("re-read the shard map before removing from %s/%s: %w", at.Addr(), at.Schema, err)
	}
	return checkRemoval(m, at, t)
}

func sameHost(a, b string) bool {
	norm := func(h string) string {
		h = strings.ToLower(h)
		if h == "localhost" || h == "::1" {
			return "127.0.0.1"
		}
		return h
	}
	return norm(a) == norm(b)
}

func SameEndpoint(l shardmap.Location, e plans.Endpoint) bool {
	return sameHost(l.Host, e.Host) && l.Port == e.Port && l.Schema == e.Schema
}

// checkRemoval is GuardRemoval over a map already read.
func checkRemoval(m *shardmap.Map, at plans.Endpoint, t *tables.Table) error {
	for _, l := range m.Locations {
		if !SameEndpoint(l, at) {
			continue
		}
		ms := m.ShardMappings(l.ShardID)
		if len(ms) == 0 {
			continue // a location nothing routes to (a merged shard, a split's unused location)
		}
		live := func(what string, mp shardmap.Mapping) error {
			return fmt.Errorf("%w: refusing to %s on %s: shard %d lives there (mapping %s, %s, shard map version %d); nothing was removed",
				ErrLive, what, at.Addr(), l.ShardID, mp, mp.Status, m.Version)
		}
		if t == nil {
			return live("drop schema "+at.Schema, ms[0])
		}
		what := fmt.Sprintf("delete rows of %s.%s", at.Schema, t.Name)
		if t.Filter.Empty() {
			continue
		}
		f, col, sharded := m.TableFunction(t.Name)
		if !sharded {
			return live(what+" (a global table the shard needs)", ms[0])
		}
		for _, mp := range ms {
			if mp.FuncID != f.ID {
				continue
			}
			owned := m.Owned(f, l.ShardID, col.Column)
			if owned.Column == "" {
				owned.Column = "key"
			}
			if t.Filter.Overlaps(owned) {
				return live(what+" that reach keys it owns", mp)
			}
			break
		}
	}
	return nil
}

// ownedBy is what shard id owns, per partition function (none when it has no mappings).
func ownedBy(m *shardmap.Map, id int) []plans.Owned {
	var out []plans.Owned
	for _, f := range m.Functions {
		flt := m.Owned(f, id, "key")
		if !flt.Empty() {
			out = append(out, plans.OwnedOf(id, f.ID, flt))
		}
	}
	return out
}

// planShards are the existing shards a plan is about: its source, and a merge's target.
func planShards(p *plans.Plan) []int {
	ids := []int{p.Source.ShardID}
	if p.Target.ShardID > 0 && p.Target.ShardID != p.Source.ShardID && operation.Of(p.Operation).IntoExisting {
		ids = append(ids, p.Target.ShardID)
	}
	return ids
}

// RecordAgainst stores the map version and the keys the plan's shards own now.
func RecordAgainst(m *shardmap.Map, p *plans.Plan) {
	a := &plans.Against{Version: m.Version}
	for _, id := range planShards(p) {
		a.Owned = append(a.Owned, ownedBy(m, id)...)
	}
	p.Against = a
}

func describeOwned(os []plans.Owned) string {
	if len(os) == 0 {
		return "no keys"
	}
	var parts []string
	for _, o := range os {
		var ks []string
		for _, r := range o.Keys.Ranges {
			ks = append(ks, r.String())
		}
		for _, a := range o.Keys.Arcs {
			ks = append(ks, "arc ("+a.After+", "+a.Upto+"]")
		}
		sort.Strings(ks)
		if o.Points > 0 {
			ks = append(ks, fmt.Sprintf("%d list keys (digest %.15s)", o.Points, strings.TrimPrefix(o.Digest, "sha256:")))
		}
		parts = append(parts, fmt.Sprintf("function %d: %s", o.FuncID, strings.Join(ks, " ")))
	}
	return strings.Join(parts, "; ")
}

func sameKeys(a, b []plans.Owned) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		found := false
		for _, y := range b {
			if x.FuncID == y.FuncID && x.Keys.Equal(y.Keys) && x.Points == y.Points && x.Digest == y.Digest {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Current refuses (ErrStale) a plan whose world changed since it was
// made. Before cutover, its source (and a merge's target) must be where the
// plan says and own the same keys (a range the plan's own split step cut in
// two is the same keys), and no other shard may live at the target. After
// cutover, the shard map must still point where the cutover put it.
func Current(m *shardmap.Map, p *plans.Plan) error {
	if p.Against == nil {
		return nil // a plan from before plans recorded this
	}
	stale := func(format string, a ...any) error {
		return fmt.Errorf("%w: plan %s was made against shard map version %d, now %d: %s; nothing was changed. Abort it ('shardctl plan abort %s': it removes only what this plan created) and make a new plan",
			ErrStale, p.ID, p.Against.Version, m.Version, fmt.Sprintf(format, a...), p.ID)
	}
	if p.CutOver() {
		l, err := m.Location(p.Target.ShardID)
		if err == nil && SameEndpoint(l, p.Target) {
			return nil
		}
		if p.Window != nil && RoutesToSource(m, p) == nil {
			return nil // reverted inside its reverse window: the source serves again
		}
		return stale("this plan's cutover put shard %d at %s/%s, but the shard map no longer points there", p.Target.ShardID, p.Target.Addr(), p.Target.Schema)
	}
	if SwitchCommitted(m, p) {
		return nil // its own switch, unconfirmed: the cutover applies it again
	}
	for _, id := range planShards(p) {
		want := p.Source
		if id != p.Source.ShardID {
			want = p.Target
		}
		l, err := m.Location(id)
		if err != nil {
			return stale("shard %d is no longer in the shard map", id)
		}
		if !SameEndpoint(l, want) {
			return stale("shard %d lived at %s/%s and now lives at %s/%s", id, want.Addr(), want.Schema, l.Addr(), l.Schema)
		}
		var then []plans.Owned
		for _, o := range p.Against.Owned {
			if o.ShardID == id {
				then = append(then, o)
			}
		}
		if now := ownedBy(m, id); !sameKeys(then, now) {
			return stale("shard %d owned %s and now owns %s", id, describeOwned(then), describeOwned(now))
		}
	}
	if id := LiveAtTarget(m, p); id > 0 {
		return stale("shard %d now lives at this plan's target %s/%s", id, p.Target.Addr(), p.Target.Schema)
	}
	return nil
}

// LiveAtTarget returns the id of a shard other than the plan's own that
// lives, with mappings, at the plan's target (0: none).
func LiveAtTarget(m *shardmap.Map, p *plans.Plan) int {
	for _, l := range m.Locations {
		if !SameEndpoint(l, p.Target) || l.ShardID == p.Source.ShardID {
			continue
		}
		if p.Target.ShardID > 0 && l.ShardID == p.Target.ShardID {
			continue // the merge target, or the split's own new location
		}
		if len(m.ShardMappings(l.ShardID)) == 0 {
			continue // nothing routes there (a split's location registered just before a crash, say)
		}
		return l.ShardID
	}
	return 0
}

// CheckCurrent reads the shard map and runs Current.
func CheckCurrent(ctx context.Context, store *shardmap.Store, p *plans.Plan) error {
	m, err := store.Load(ctx)
	if err != nil {
		return err
	}
	return Current(m, p)
}

// RoutesToSource checks that the shard map sends the moved rows to the
// source: the location back at the source server (move), the moved range or
// ring point at the source shard (split, merge).
func RoutesToSource(m *shardmap.Map, p *plans.Plan) error {
	for _, c := range p.Window.Revert {
		switch c.Op {
		case shardmap.OpMoveLocation:
			loc, err := m.Location(p.Source.ShardID)
			if err != nil {
				return err
			}
			if loc.Host != p.Source.Host || loc.Port != p.Source.Port {
				return fmt.Errorf("the shard map points shard %d at %s, not at the source %s", loc.ShardID, loc.Addr(), p.Source.Addr())
			}
		case shardmap.OpRepoint:
			ok := false
			for _, mp := range m.ShardMappings(p.Source.ShardID) {
				r := mp.Ref()
				ok = ok || r.FuncID == c.Ref.FuncID && r.Kind == c.Ref.Kind && r.Hash == c.Ref.Hash &&
					(r.Lower == nil) == (c.Ref.Lower == nil) && (r.Lower == nil || r.Lower.Compare(*c.Ref.Lower) == 0)
			}
			if !ok {
				return fmt.Errorf("the moved mapping does not point at shard %d", p.Source.ShardID)
			}
		}
	}
	return nil
}

// SwitchCommitted reports whether m holds p's switch though p does not
// record it: the cutover's commit went through and its acknowledgement was
// lost. The plan is then current, and only a resume may end it.
func SwitchCommitted(m *shardmap.Map, p *plans.Plan) bool {
	return !p.CutOver() && p.Done(plans.StepFence) && len(p.Cutover) > 0 && m.Holds(p.Cutover)
}
