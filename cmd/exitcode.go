package cmd

import (
	"context"
	"errors"
	"strings"

	"github.com/shardctl/shardctl/lock"
	"github.com/shardctl/shardctl/pipeline"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
)

// exitCode is the one place errors become exit codes (docs/exit-codes.md).
// An operation's failure (opError) is mapped with its plan's state first; a
// code chosen where the error was made (withCode) comes next; then the
// domain errors every command shares.
func exitCode(err error) int {
	var of *opFailure
	if errors.As(err, &of) {
		if code, ok := operationExit(of.err, of.plan); ok {
			return code
		}
	}
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, shardmap.ErrBadInput), errors.Is(err, shardmap.ErrNotFound), errors.Is(err, errUsage):
		return ExitBadInput
	case errors.Is(err, context.Canceled):
		return ExitResumable
	case strings.HasPrefix(err.Error(), "unknown command"):
		return ExitBadInput // cobra's error for an unknown top-level command
	}
	return ExitFailed
}

// operationExit is the exit code of a run of a plan that failed with err,
// when the failure has one of its own.
func operationExit(err error, p *plans.Plan) (int, bool) {
	switch {
	case errors.Is(err, pipeline.ErrRefused), errors.Is(err, shardmap.ErrBadInput), errors.Is(err, shardmap.ErrNotFound), errors.Is(err, plans.ErrDamaged), errors.Is(err, pipeline.ErrCutOver):
		return ExitBadInput, true
	case errors.Is(err, pipeline.ErrLive):
		return ExitFailed, true
	case errors.Is(err, lock.ErrBusy):
		return ExitBusy, true
	case errors.Is(err, pipeline.ErrMismatch):
		return ExitMismatch, true
	case errors.Is(err, pipeline.ErrPurged):
		return ExitFailed, true
	case isDeterministic(err):
		return ExitFailed, true // the plan stays resumable once the cause is fixed
	case pipeline.Resumable(err, p):
		return ExitResumable, true
	}
	return 0, false
}

// opFailure is an operation's error (move, split, merge, apply, resume,
// abort, revert...) with its plan (nil before one exists), for exitCode.
type opFailure struct {
	err  error
	plan *plans.Plan
}

func (e *opFailure) Error() string { return e.err.Error() }
func (e *opFailure) Unwrap() error { return e.err }

// opError marks err as an operation's failure.
func (a *app) opError(err error, p *plans.Plan) error {
	if err == nil {
		return nil
	}
	return &opFailure{err: err, plan: p}
}

// isDeterministic reports a step failure that a resume repeats until an
// operator fixes its cause.
func isDeterministic(err error) bool {
	var se *pipeline.StepError
	return errors.As(err, &se) && !se.Transient
}
