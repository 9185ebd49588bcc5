package checks

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/shardctl/shardctl/operation"
	"github.com/shardctl/shardctl/pipeline/failure"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
)

// Every refusal before a step is a check (block/spirit's check registry):
// one file per check, check_*.go, each registering itself with the
// operations it applies to and the step until which it holds. They run when
// a plan is made (so a dry run refuses what a run would), and again under the
// plan's locks at every 'plan apply' and 'plan resume', since a plan may run
// hours after it was made; the preflight step records that they passed.

// Check is one check.
type Check struct {
	Name string
	// Only picks the operations it applies to by what they are (package
	// operation); nil: all.
	Only func(operation.Op) bool
	// Until is the step that ends it: the check runs only while that step has
	// not started (a merge's collision scan would find its own copied rows
	// once the copy began). "": always.
	Until string
	Run   func(ctx context.Context, c *CheckEnv) error
}

// CheckEnv is what a check reads.
type CheckEnv struct {
	Src, Dst *sql.DB
	Plan     *plans.Plan
	Map      *shardmap.Map // read under the plan's locks at apply/resume
	Store    *shardmap.Store
	Planning bool // the plan is being made (a dry run or --plan-out included)
}

var registry []Check

func register(c Check) { registry = append(registry, c) }

func (c Check) applies(p *plans.Plan) bool {
	if c.Only != nil && !c.Only(operation.Of(p.Operation)) {
		return false
	}
	if c.Until != "" {
		if s := p.Step(c.Until); s != nil && (s.Attempts > 0 || p.Done(c.Until)) {
			return false
		}
	}
	return true
}

// RunChecks runs every registered check that applies to the plan now and
// returns every refusal at once (failure.ErrRefused; nothing was changed), so an
// operator fixes all of them in one go. A check that could not run (a probe
// the server refused, a lost connection) stops them: with the refusals so
// far if there are any, else with its own error.
func RunChecks(ctx context.Context, c *CheckEnv) error {
	var refused refusals
	for _, ch := range registry {
		if !ch.applies(c.Plan) {
			continue
		}
		if err := ch.Run(ctx, c); err != nil {
			err = fmt.Errorf("check %s: %w", ch.Name, err)
			if !errors.Is(err, failure.ErrRefused) {
				if len(refused) > 0 {
					// What was refused comes first (a stale plan makes the
					// reads of the checks after it fail); they run again
					// once it is fixed.
					return refused
				}
				return err
			}
			refused = append(refused, err)
		}
	}
	if len(refused) > 0 {
		return refused
	}
	return nil
}

// refusals are the refusals of one run of the checks: one error that says
// them all and matches what each of them wraps (failure.ErrRefused, fkcheck.ErrCrossing…).
type refusals []error

func (r refusals) Error() string {
	msgs := make([]string, len(r))
	for i, err := range r {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (r refusals) Unwrap() []error { return r }
