package pipeline

// Hand edits of the shard map (the shardmap subcommands) while plans run.
// A plan owns its shards, their mappings and its two locations (the source,
// the target copy) from its first run until it is done or aborted: an edit
// of any of them under it breaks its cutover (a second location at the
// target copy collides with the switch) or its abort, so the edit is refused
// until the plan ends.

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/lock"
	"github.com/shardctl/shardctl/operation"
	"github.com/shardctl/shardctl/pipeline/interlock"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/planstore"
	"github.com/shardctl/shardctl/shardmap"
)

// MapEdit is a hand edit of the shard map, described by what it touches.
type MapEdit struct {
	Command string          // the subcommand, for messages ("add-shard")
	Shards  []int           // shards whose location or mappings it changes, or that it maps keys to
	At      *plans.Endpoint // a location it registers (add-shard)
	// Function, with Key or Hash: the shard that owns the key (a range's
	// lower bound, a list key) or the ring position gives keys up.
	Function string
	Key      string
	Hash     string
	// AllOfFunction: the edit changes the keys of every shard of Function
	// (add-column makes a global table sharded).
	AllOfFunction bool
	// Removes: the edit removes the Shards' locations (remove-shard). A
	// location at a plan's endpoint under another id (registered by hand
	// beside the plan's own) may go: it is what breaks the plan's cutover.
	Removes bool
	// Lines name, for a shard the edit touches, the input line that
	// touches it first (import): a refusal names it.
	Lines map[int]string
}

// CheckMapEdit refuses e as EditMap would, without taking a lock or
// changing anything (a dry run's check).
func CheckMapEdit(ctx context.Context, store *shardmap.Store, dir string, e MapEdit) error {
	_, err := guardMapEdit(ctx, store, dir, e)
	return err
}

// EditMap runs edit when no unfinished plan (in the plan directory dir or in
// the sharding database) owns what e touches, under the locks of the shards
// it touches so no plan starts on them meanwhile; otherwise it refuses
// (ErrRefused) naming the plan and the commands that end it, and edit does
// not run.
func EditMap(ctx context.Context, store *shardmap.Store, dir string, e MapEdit, edit func() error) error {
	ids, err := guardMapEdit(ctx, store, dir, e)
	if err != nil {
		return err
	}
	if len(ids) > 0 {
		names := make([]string, len(ids))
		for i, id := range ids {
			names[i] = lock.Name(store.Schema, id)
		}
		l, err := lock.Acquire(ctx, store.DB, store.Schema, names, lock.Holder("shardmap "+e.Command))
		if err != nil {
			return err
		}
		defer l.Release()
		// A plan that took the locks first, and saved itself running, is seen now.
		if _, err := guardMapEdit(ctx, store, dir, e); err != nil {
			return err
		}
	}
	return edit()
}

// guardMapEdit reads the map and the unfinished plans and runs checkMapEdit;
// it returns the shards e touches.
func guardMapEdit(ctx context.Context, store *shardmap.Store, dir string, e MapEdit) ([]int, error) {
	m, err := store.Load(ctx)
	if err != nil {
		return nil, err
	}
	ps, err := planstore.Unfinished(ctx, dir, planstore.New(store.DB, store.Schema))
	if err != nil {
		return nil, fmt.Errorf("%s: read the unfinished plans: %w", e.Command, err)
	}
	ids, p, what := checkMapEdit(m, ps, e)
	if p == nil {
		return ids, nil
	}
	running, _ := lock.InUse(ctx, store.DB, p.Locks)
	return nil, mapEditRefusal(e, p, what, running)
}

// mapEditRefusal says which plan owns what e touches and how that plan ends.
func mapEditRefusal(e MapEdit, p *plans.Plan, what string, running bool) error {
	end := fmt.Sprintf("finish it ('shardctl plan resume %s') or abort it ('shardctl plan abort %s')", p.ID, p.ID)
	if running {
		end = fmt.Sprintf("a process runs it now: wait for it to end ('shardctl plan watch %s'), or abort it ('shardctl plan abort %s')", p.ID, p.ID)
	}
	return fmt.Errorf("%w: shardmap %s touches %s, which plan %s owns (%s, %s, next step %s) until it is done or aborted; nothing was changed. %s, then edit the map",
		ErrRefused, e.Command, what, p.ID, p.Summary, p.State, orDone(p.NextStep()), end)
}

func orDone(step string) string {
	if step == "" {
		return "none"
	}
	return step
}

// started reports a plan that owns what it works on: one that has run
// (a new plan only reads the map, and a run compares it with the map first).
func started(p *plans.Plan) bool {
	return p.State == plans.StateRunning || p.State == plans.StateStopped
}

// checkMapEdit returns the shards e touches (sorted) and, when an unfinished
// plan of ps owns one of them or the location e registers, that plan and
// what of it e touches.
func checkMapEdit(m *shardmap.Map, ps []*plans.Plan, e MapEdit) ([]int, *plans.Plan, string) {
	ids := touchedShards(m, e)
	for _, p := range ps {
		if !started(p) {
			continue
		}
		own := ownedShards(p)
		ends := []plans.Endpoint{p.Source}
		if p.Target.Host != "" {
			ends = append(ends, p.Target)
		}
		for _, id := range ids {
			if slices.Contains(own, id) {
				return ids, p, fmt.Sprintf("shard %d", id) + e.line(id)
			}
			if e.Removes {
				continue
			}
			l, err := m.Location(id)
			if err != nil {
				continue
			}
			for _, end := range ends {
				if interlock.SameEndpoint(l, end) {
					return ids, p, fmt.Sprintf("shard %d, located at %s/%s (%s)", id, end.Addr(), end.Schema, endName(p, end)) + e.line(id)
				}
			}
		}
		if e.At == nil {
			continue
		}
		at := shardmap.Location{Host: e.At.Host, Port: e.At.Port, Schema: e.At.Schema}
		for _, end := range ends {
			if interlock.SameEndpoint(at, end) {
				return ids, p, fmt.Sprintf("%s/%s (%s)", end.Addr(), end.Schema, endName(p, end))
			}
		}
	}
	return ids, nil, ""
}

// line names the input line that touches shard id, if e says.
func (e MapEdit) line(id int) string {
	if l, ok := e.Lines[id]; ok {
		return " (" + l + ")"
	}
	return ""
}

// endName names a plan's endpoint for a person.
func endName(p *plans.Plan, e plans.Endpoint) string {
	if e == p.Source {
		return "its source"
	}
	if operation.Of(p.Operation).IntoExisting {
		return "the existing shard it moves rows into"
	}
	return "its target copy"
}

// ownedShards are the shards a plan works on: its source, its target (a
// merge's neighbour, a split's new shard once registered) and every shard
// its shard-map changes name.
func ownedShards(p *plans.Plan) []int {
	ids := []int{p.Source.ShardID, p.Target.ShardID}
	for _, cs := range [][]shardmap.Change{p.Prepare, p.Offline, p.Cutover, p.AfterCleanup, p.Abort} {
		for _, c := range cs {
			ids = append(ids, c.ShardID)
		}
	}
	return slices.DeleteFunc(ids, func(id int) bool { return id <= 0 })
}

// touchedShards are the shards e changes: those it names, the owner of its
// key or ring position, every shard of its function for AllOfFunction.
func touchedShards(m *shardmap.Map, e MapEdit) []int {
	ids := append([]int(nil), e.Shards...)
	if f, err := m.Function(e.Function); err == nil {
		ms := m.MappingsOf(f.ID)
		switch {
		case e.AllOfFunction:
			for _, mp := range ms {
				ids = append(ids, mp.ShardID)
			}
		case e.Hash != "" && len(ms) > 0:
			points := make([]string, len(ms))
			for i, mp := range ms {
				points[i] = mp.Hash
			}
			if i := keyspace.Owner(points, strings.ToLower(e.Hash)); i >= 0 {
				ids = append(ids, ms[i].ShardID)
			}
		case e.Key != "":
			if res, err := m.Lookup(f, e.Key); err == nil {
				ids = append(ids, res.Mapping.ShardID)
			}
		}
	}
	ids = slices.DeleteFunc(ids, func(id int) bool { return id <= 0 })
	slices.Sort(ids)
	return slices.Compact(ids)
}
