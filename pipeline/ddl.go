package pipeline

import (
	"context"
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
		if old.Position == plans.Position(d.At) && old.Statement == d.Statement {
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
		if r.p.Copy[i].Name == d.Table {
			r.p.Copy[i].Columns = d.Columns
		}
	}
	r.mu.Unlock()
	return r.save(true)
}
