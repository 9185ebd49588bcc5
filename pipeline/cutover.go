package pipeline

// The cutover step: the shard-map switch in one transaction, behind the
// fence the fence step left holding (blackout.go).

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/shardctl/shardctl/binlog"
	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
)

func msSince(t time.Time) float64 { return float64(time.Since(t).Microseconds()) / 1000 }

func fenceTables(p *plans.Plan) []fence.Table {
	out := make([]fence.Table, len(p.Fence))
	for i, f := range p.Fence {
		out[i] = fence.Table{Name: f.Name, Filter: f.Filter}
	}
	return out
}

func fenceNames(p *plans.Plan) []string { return names(fenceTables(p)) }

// onlineAgain turns "mark offline" changes into "mark online" ones.
func onlineAgain(cs []shardmap.Change) []shardmap.Change {
	var out []shardmap.Change
	for _, c := range cs {
		if c.Op == shardmap.OpSetStatus && c.Status == shardmap.Offline {
			c.Status = shardmap.Online
			out = append(out, c)
		}
	}
	return out
}

// cutover switches the shard map in one transaction once the target holds
// every write the source acknowledged before the fence.
func (r *runner) cutover(ctx context.Context) error {
	final := binlog.Position(r.p.Checkpoints.Final)
	if final.IsZero() {
		return errors.New("no final position recorded: the fence step did not finish")
	}
	if binlog.Position(r.p.Checkpoints.Applied).Compare(final) < 0 {
		// Resumed after a crash between the fence and here: finish the final catch-up.
		if err := r.ensureTail(ctx); err != nil {
			return err
		}
		if err := r.tail.WaitFor(ctx, final); err != nil {
			return err
		}
	}
	// Before the window's position is read, so a reverse tail never sees the ALTERs.
	counters := time.Now()
	if err := r.carryCounters(ctx, r.src, r.p.Source.Schema, r.dst, r.p.Target.Schema, r.p.Copy, false); err != nil {
		return err
	}
	countersMS := msSince(counters)
	if err := r.windowAtCutover(ctx); err != nil {
		return err
	}
	start := time.Now()
	if err := r.env.Store.Apply(ctx, "cut over", r.p.Cutover); err != nil {
		return err
	}
	// The blackout ends here: routers write to the target from this commit on.
	r.mu.Lock()
	if n := len(r.p.Attempts); n > 0 {
		a := &r.p.Attempts[n-1]
		if a.Phases != nil {
			a.Phases["counters"] = countersMS
			// From the fence step's last phase to the switch: the step
			// transition (the plan saved with the fence done, the window's position).
			a.Phases["handoff"] = max(0, float64(start.Sub(a.Started).Microseconds())/1000-sumPhases(a.Phases))
			a.Phases["cutover"] = msSince(start)
		}
		a.BlackoutM = msSince(a.Started)
		a.Result = "cut over" + strings.TrimPrefix(a.Result, attemptFencing)
		r.p.Result.BlackoutMS = a.BlackoutM
	}
	n := len(r.p.Attempts)
	r.mu.Unlock()
	if n > 0 {
		r.noteAttempt(n - 1)
	}
	if err := r.stopTail(); err != nil {
		return fmt.Errorf("cut over done; stopping the binlog tail: %w", err)
	}
	if err := r.finishObjects(ctx); err != nil {
		return fmt.Errorf("cut over done; schema objects: %w", err)
	}
	return nil
}

// sumPhases adds up an attempt's phases (each the time since the previous one).
func sumPhases(ps map[string]float64) float64 {
	var t float64
	for _, v := range ps {
		t += v
	}
	return t
}
