package pipeline

// The safety interlocks. Plans are made and run at different times, and the
// shard map moves on in between: before anything destructive, the pipeline
// re-reads the map and refuses to remove what a live mapping owns
// (GuardRemoval), and a plan is compared with the map it was made against
// before it runs, resumes or aborts (checkCurrent).

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/operation"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
	"github.com/shardctl/shardctl/tables"
)

// ErrLive marks a destructive statement refused because a live mapping owns
// what it would remove. Nothing was removed.
var ErrLive = errors.New("owned by a live shard")

// ErrStale marks a plan whose shards moved or changed keys since it was made.
var ErrStale = fmt.Errorf("%w: stale plan", ErrRefused)

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

func sameEndpoint(l shardmap.Location, e plans.Endpoint) bool {
	return sameHost(l.Host, e.Host) && l.Port == e.Port && l.Schema == e.Schema
}

// checkRemoval is GuardRemoval over a map already read.
func checkRemoval(m *shardmap.Map, at plans.Endpoint, t *tables.Table) error {
	for _, l := range m.Locations {
		if !sameEndpoint(l, at) {
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
			out = append(out, plans.Owned{ShardID: id, FuncID: f.ID, Keys: flt})
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

// recordAgainst stores the map version and the keys the plan's shards own now.
func recordAgainst(m *shardmap.Map, p *plans.Plan) {
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
		for _, p := range o.Keys.Points {
			ks = append(ks, "key "+p.String())
		}
		sort.Strings(ks)
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
			if x.FuncID == y.FuncID && x.Keys.Equal(y.Keys) {
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

// checkCurrent refuses (ErrStale) a plan whose world changed since it was
// made. Before cutover, its source (and a merge's target) must be where the
// plan says and own the same keys (a range the plan's own split step cut in
// two is the same keys), and no other shard may live at the target. After
// cutover, the shard map must still point where the cutover put it.
func checkCurrent(m *shardmap.Map, p *plans.Plan) error {
	if p.Against == nil {
		return nil // a plan from before plans recorded this
	}
	stale := func(format string, a ...any) error {
		return fmt.Errorf("%w: plan %s was made against shard map version %d, now %d: %s; nothing was changed. Abort it ('shardctl plan abort %s': it removes only what this plan created) and make a new plan",
			ErrStale, p.ID, p.Against.Version, m.Version, fmt.Sprintf(format, a...), p.ID)
	}
	if p.CutOver() {
		l, err := m.Location(p.Target.ShardID)
		if err == nil && sameEndpoint(l, p.Target) {
			return nil
		}
		if p.Window != nil && routesToSource(m, p) == nil {
			return nil // reverted inside its reverse window: the source serves again
		}
		return stale("this plan's cutover put shard %d at %s/%s, but the shard map no longer points there", p.Target.ShardID, p.Target.Addr(), p.Target.Schema)
	}
	if switchCommitted(m, p) {
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
		if !sameEndpoint(l, want) {
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
	if id := liveAtTarget(m, p); id > 0 {
		return stale("shard %d now lives at this plan's target %s/%s", id, p.Target.Addr(), p.Target.Schema)
	}
	return nil
}

// liveAtTarget returns the id of a shard other than the plan's own that
// lives, with mappings, at the plan's target (0: none).
func liveAtTarget(m *shardmap.Map, p *plans.Plan) int {
	for _, l := range m.Locations {
		if !sameEndpoint(l, p.Target) || l.ShardID == p.Source.ShardID {
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

// CheckCurrent reads the shard map and runs checkCurrent.
func CheckCurrent(ctx context.Context, store *shardmap.Store, p *plans.Plan) error {
	m, err := store.Load(ctx)
	if err != nil {
		return err
	}
	return checkCurrent(m, p)
}

// abortStale undoes only what a stale plan provably created: its copy at the
// target where no live shard owns it, and a location it registered that
// nothing uses. The shard map's mappings and the source are left alone (they
// belong to whatever changed the map since); what is kept is listed.
func abortStale(ctx context.Context, r *runner, why error) error {
	p := r.p
	kept := []string{"the shard map's mappings and the source were left as they are (" + why.Error() + ")"}
	if p.Step(plans.StepCreate).Attempts > 0 {
		if err := r.undoTargetCopy(ctx, "abort", &kept); err != nil {
			return err
		}
	}
	for _, c := range p.Abort {
		if c.Op != shardmap.OpRemoveLocation || c.ShardID <= 0 {
			continue
		}
		if err := r.env.Store.Apply(ctx, "abort "+p.ID+": remove the location it registered", []shardmap.Change{c}); err != nil {
			kept = append(kept, fmt.Sprintf("shard %d's location: %v", c.ShardID, err))
		}
	}
	if left, err := fence.Installed(ctx, r.src, p.Source.Schema); err == nil && len(left) > 0 {
		kept = append(kept, fmt.Sprintf("fence triggers on %s/%s (%s): they fail writes to fenced rows; resume or abort the plan that installed them, or drop them if none did",
			p.Source.Addr(), p.Source.Schema, strings.Join(left, ", ")))
	}
	p.AbortKept = kept
	p.State = plans.StateAborted
	return r.save(true)
}

// abortIfStale runs a stale plan's abort (abortStale) and reports whether it did.
func abortIfStale(ctx context.Context, r *runner) (bool, error) {
	err := CheckCurrent(ctx, r.env.Store, r.p)
	if errors.Is(err, ErrStale) {
		return true, abortStale(ctx, r, err)
	}
	return err != nil, err
}
