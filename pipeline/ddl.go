package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/shardctl/shardctl/binlog"
	"github.com/shardctl/shardctl/plans"
)

// carriedDDL records a schema change the tail carries (--on-ddl apply or
// ignore) and gives the copied table its new columns, so verify and a
// resumed tail work with the table's new shape. A change met again after a
// crash (the tail replays from the boundary before it) is recorded once; a
// note (the target had it already) is added to its record.
func (r *runner) carriedDDL(_ context.Context, d binlog.CarriedDDL) error {
	r.mu.Lock()
	seen := false
	for i, old := range r.p.DDL {
		// The place, not the GTID set written beside it: a resumed tail may
		// spell the same set another way.
		at := plans.Position(d.At)
		if old.Position.File == at.File && old.Position.Pos == at.Pos && old.Position.Server == at.Server && old.Statement == d.Statement {
			seen = true
			if d.Note != "" {
				r.p.DDL[i].Note = d.Note
			}
		}
	}
	if !seen {
		r.p.DDL = append(r.p.DDL, plans.DDL{At: time.Now().UTC(), Position: plans.Position(d.At), Table: d.Table,
			Statement: d.Statement, Ran: d.Ran, Mode: d.Mode, Note: d.Note})
	}
	for i := range r.p.Copy {
		if r.p.Copy[i].Name == d.Table && d.Columns != nil { // nil: not known before it ran (binlog.CarriedDDL)
			r.p.Copy[i].Columns = d.Columns
		}
	}
	r.mu.Unlock()
	return r.save(true)
}

// carryDuringCopy brings the target through a schema change made on the
// source while the copy ran (--on-ddl apply; the copy stopped before
// writing a chunk read after it, snapshot.ErrDefinitionChanged): the binlog
// tail replays the source up to its current position, running the
// statement on the target at its place in the stream, and stops again, so
// the copy goes on from its watermarks with the table's new columns and
// never writes beside the tail. A change the tail cannot carry stops the
// step as it would stop the catch-up. quiet counts the syncs in a row that
// carried nothing: the copy's view and the plan's disagree for some other
// reason, and copying on would loop.
func (r *runner) carryDuringCopy(ctx context.Context, cause error, quiet *int) error {
	r.env.Log.Info("a table's columns changed on the source during the copy: the binlog tail carries the change to the target before the copy goes on", "cause", cause)
	r.mu.Lock()
	before := len(r.p.DDL)
	r.mu.Unlock()
	if _, err := r.waitCaughtUp(ctx, 0); err != nil {
		return err
	}
	if err := r.stopTail(); err != nil {
		return err
	}
	r.mu.Lock()
	carried := len(r.p.DDL) - before
	r.mu.Unlock()
	if carried > 0 {
		*quiet = 0
		return nil
	}
	if *quiet++; *quiet >= 2 {
		return fmt.Errorf("%w; the binlog tail found no schema change to carry up to the source's current position: abort the plan ('shardctl plan abort %s') and start a new one", cause, r.p.ID)
	}
	return nil
}
