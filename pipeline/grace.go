package pipeline

// Routers cache the shard map (router.Options.TTL) and can send a write to
// a copy the map has just stopped pointing at. The fence turns such a write
// away only while the row is there: a DELETE or UPDATE that matches no row
// fires no trigger and "succeeds", so a cleanup that deleted the row first
// made a router's acknowledged delete vanish (seen in TestRebalanceFromCron:
// the drain's cleanup pruned the old copy a few ms after the switch, inside
// the load's 500 ms cache). The old copy therefore keeps its rows and its
// fence for the route grace after the last switch away from it.

import (
	"context"
	"strings"
	"time"

	"github.com/shardctl/shardctl/plans"
)

// The results of the attempts that switched the shard map.
const (
	attemptCutOver  = "cut over"
	attemptSwitched = "switched to the "
)

// lastSwitch is when the shard map last sent routers elsewhere: the
// cutover, or a reverse window's last switch. The zero time: the switch is
// not on record (a crash right after it), so the grace runs from now.
func lastSwitch(p *plans.Plan) time.Time {
	var at time.Time
	for _, a := range p.Attempts {
		if strings.HasPrefix(a.Result, attemptCutOver) || strings.HasPrefix(a.Result, attemptSwitched) {
			if end := a.Started.Add(time.Duration(a.BlackoutM * float64(time.Millisecond))); end.After(at) {
				at = end
			}
		}
	}
	if p.Window != nil {
		for _, s := range p.Window.Switches {
			if s.At.After(at) {
				at = s.At
			}
		}
	}
	return at
}

// awaitRouters waits out the rest of the route grace before the copy routers
// were sent away from is changed (cleanup's prune, drop or fence removal).
func (r *runner) awaitRouters(ctx context.Context) error {
	r.mu.Lock()
	at, grace := lastSwitch(r.p), r.p.Options.RouteGrace()
	r.mu.Unlock()
	if at.IsZero() {
		at = time.Now()
	}
	wait := time.Until(at.Add(grace))
	if wait <= 0 {
		return nil
	}
	r.env.Log.Info("cleanup waits for routers' cached shard maps before changing the old copy", "wait", wait.Round(time.Millisecond), "route_grace", grace)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
