package pipeline

import (
	"context"
	"fmt"
	"slices"

	"github.com/shardctl/shardctl/pipeline/fkcheck"
	"github.com/shardctl/shardctl/plans"
)

// recheckKeys reads the keys again before the fence (the verify step, which
// runs even when checksums are off): rows the application wrote since
// planning may cross now. A crossing stops the run, deterministically, with
// the rows named; 'plan resume' checks again once they are fixed.
func (r *runner) recheckKeys(ctx context.Context) error {
	checks, crossing, err := fkcheck.CheckKeysOnData(ctx, r.src, r.p, plans.StepVerify, r.thr.Wait)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.p.KeyChecks = append(slices.DeleteFunc(r.p.KeyChecks, func(k plans.KeyCheck) bool { return k.When == plans.StepVerify }), checks...)
	r.mu.Unlock()
	if crossing != "" {
		return fmt.Errorf("%w: %s", fkcheck.ErrCrossing, crossing)
	}
	return nil
}
