package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"os"

	"github.com/shardctl/shardctl/lock"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/planstore"
	"github.com/shardctl/shardctl/shardmap"
)

// DiscardRefused removes a new plan's file (path) and its copy in the
// sharding database when its first run failed with err refused (a check, the
// plan-start hook, the shard's lock held by another run) before any step
// changed anything: there is nothing to resume or abort, and a cron wrapper
// must not find it. It reports whether it removed the plan.
func DiscardRefused(s *shardmap.Store, p *plans.Plan, path string, err error, log *slog.Logger) bool {
	if err == nil || !p.Untouched() || !(errors.Is(err, ErrRefused) || errors.Is(err, lock.ErrBusy)) {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), planstore.Timeout)
	defer cancel()
	if derr := planstore.New(s.DB, s.Schema).Delete(ctx, p.ID); derr != nil {
		log.Warn("refused plan: could not remove its copy in the sharding database", "plan", p.ID, "err", derr)
		return false // keep the file too: the two copies stay alike
	}
	if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		log.Warn("refused plan: could not remove its file", "plan", p.ID, "err", rerr)
		return false
	}
	return true
}
