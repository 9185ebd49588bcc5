// Package window is the reverse-replication window's plan logic: after a
// cutover the side that no longer serves keeps its copy, fenced against the
// application, and a tail from the serving side's binlog keeps it in sync.
// A switch ('plan revert') runs the cutover's blackout in the other
// direction: mappings offline, fence on the serving side, final catch-up to
// the position read behind the fence, shard map pointed at the other side,
// online. The window ends with 'plan complete' or at its end time; then the
// cleanup runs (or, when the source serves again, the target copy is dropped).
//
// This package holds what is a function of the plan: the window's set-up,
// its preview, each side's fence and tables, the shard-map changes of a
// switch, and the request files. Running it (the tail, the switch's
// blackout, the step's loop) is the runner's, pipeline/window_run*.go.
package window

import (
	"errors"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/operation"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
	"github.com/shardctl/shardctl/tables"
)

// ErrNotNow is a window request that was not carried out (or not yet): the
// switch did not fit its budget, or the process running the window did not
// answer in time. Nothing is lost; try again (exit 3).
var ErrNotNow = errors.New("not carried out")

// Window actions.
const (
	ActionRevert   = "revert"
	ActionComplete = "complete"
)

// Setup adds the window to a plan whose options ask for one: the step
// between cutover and cleanup, and the shard-map changes of each direction.
func Setup(p *plans.Plan) {
	if p.Options.ReverseWindowS <= 0 || p.Window != nil {
		return
	}
	w := &plans.Window{DurationS: p.Options.ReverseWindowS, Serving: plans.SideSource, Forward: p.Cutover}
	for _, c := range p.Cutover {
		switch c.Op {
		case shardmap.OpMoveLocation: // move: the location back at the source server
			c.Host, c.Port = p.Source.Host, p.Source.Port
		case shardmap.OpRepoint: // split, merge: the moved range or arc back to the source shard
			c.ShardID = p.Source.ShardID
		case shardmap.OpMergeRange: // merge: the switch's offline changes split the range out again
			continue
		case shardmap.OpRemoveMapping: // hash merge: they add the ring point back (offline, on the target)
			w.Revert = append(w.Revert, shardmap.Change{Op: shardmap.OpRepoint, Ref: c.Ref, ShardID: p.Source.ShardID},
				shardmap.Change{Op: shardmap.OpSetStatus, Ref: c.Ref, Status: shardmap.Online})
			continue
		}
		w.Revert = append(w.Revert, c)
	}
	p.Window = w
	for i, s := range p.Steps {
		if s.Name == plans.StepCleanup {
			p.Steps = append(p.Steps[:i], append([]plans.StepRecord{{Name: plans.StepWindow, State: plans.Pending}}, p.Steps[i:]...)...)
			break
		}
	}
}

// PreviewStep is one group of shard-map changes --dry-run shows.
type PreviewStep struct {
	Step    string
	Changes []shardmap.Change
}

// Preview is what --dry-run shows of the window.
func Preview(p *plans.Plan) []PreviewStep {
	if p.Window == nil {
		return nil
	}
	return []PreviewStep{
		{"plan revert, behind the fence (inside the window)", OffChanges(p, plans.SideTarget)},
		{"plan revert, switch to the source", p.Window.Revert},
		{"plan revert again, switch back to the target", p.Window.Forward},
	}
}

// CompleteSQL is what 'plan complete' runs besides the cleanup's shard-map statements.
func CompleteSQL(p *plans.Plan) []string {
	if p.Window == nil {
		return nil
	}
	return []string{
		"-- plan complete, target serving: the cleanup above (chunked deletes, then DROP DATABASE " + dbutil.QuoteIdent(p.Source.Schema) + " on " + p.Source.Addr() + ")",
		"-- plan complete, source serving (reverted): DROP DATABASE " + dbutil.QuoteIdent(p.Target.Schema) + " on " + p.Target.Addr() + "; the plan ends aborted",
	}
}

// Reverted reports a plan whose window ended with the source serving.
func Reverted(p *plans.Plan) bool {
	return p.Window != nil && p.Window.Serving == plans.SideSource && p.CutOver()
}

// Other is the side that is not side.
func Other(side string) string {
	if side == plans.SideSource {
		return plans.SideTarget
	}
	return plans.SideSource
}

// Fence is what a side's fence covers: on the source the plan's fence; on
// the target of a merge only the merged range (the target's own keys stay
// writable); on any other target the same tables and rows.
func Fence(p *plans.Plan, side string) []fence.Table {
	var out []fence.Table
	if side == plans.SideTarget && operation.Of(p.Operation).IntoExisting {
		for _, t := range p.Copy {
			out = append(out, fence.Table{Name: t.Name, Filter: t.Filter})
		}
		return out
	}
	out = make([]fence.Table, len(p.Fence))
	for i, f := range p.Fence {
		out[i] = fence.Table{Name: f.Name, Filter: f.Filter}
	}
	return out
}

// Tables are the tables the window's tail keeps in sync: a move's whole
// schema; a split's sharded tables, filtered to the moved range (the global
// tables are the source's own, and each shard has its copy).
func Tables(p *plans.Plan) []tables.Table {
	if operation.Of(p.Operation).WholeSchema {
		return p.Copy
	}
	var out []tables.Table
	for _, t := range p.Copy {
		if t.Sharded {
			out = append(out, t)
		}
	}
	return out
}

// OffChanges take the moved rows offline on the serving side, derived from
// the cutover's changes (the plan's own offline changes may add mappings,
// as a hash split's ring point: not again). With the target serving, a
// merged range is first split out of the target's mapping again, and a
// merged ring point added back, pointing at the target.
func OffChanges(p *plans.Plan, serving string) []shardmap.Change {
	var pre, off []shardmap.Change
	for _, c := range p.Cutover {
		switch {
		case c.Op == shardmap.OpSetStatus && c.Status == shardmap.Online:
			off = append(off, shardmap.Change{Op: shardmap.OpSetStatus, Ref: c.Ref, Status: shardmap.Offline})
		case c.Op == shardmap.OpMergeRange && serving == plans.SideTarget:
			pre = append(pre, shardmap.Change{Op: shardmap.OpSplitRange, Ref: shardmap.Ref{FuncID: c.Ref.FuncID}, At: c.Ref.Lower})
		case c.Op == shardmap.OpRemoveMapping && serving == plans.SideTarget:
			pre = append(pre, shardmap.Change{Op: shardmap.OpAddHashPoint, Ref: c.Ref, ShardID: p.Target.ShardID, Status: shardmap.Offline})
		case c.Op == shardmap.OpRemoveMapping:
			off = append(off, shardmap.Change{Op: shardmap.OpSetStatus, Ref: c.Ref, Status: shardmap.Offline})
		}
	}
	return append(pre, off...)
}

// BackChanges undo OffChanges: mappings online again, and with the target
// serving, the range merged (or the ring point removed) again.
func BackChanges(p *plans.Plan, serving string) []shardmap.Change {
	back := shardmap.OnlineAgain(OffChanges(p, serving))
	if serving == plans.SideTarget {
		for _, c := range p.Cutover {
			if c.Op == shardmap.OpMergeRange || c.Op == shardmap.OpRemoveMapping {
				back = append(back, c)
			}
		}
	}
	return back
}
