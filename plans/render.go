package plans

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/shardctl/shardctl/dbutil/ident"
	"github.com/shardctl/shardctl/schemaobj/objdef"
	"github.com/shardctl/shardctl/shardmap/mapdef"
)

// Print renders the plan for people: what it moves, each step, the tables with
// estimates, and the exact statements it runs against the shard map.
// Long on purpose: one short section per part of the plan, in reading order.
func Print(w io.Writer, p *Plan) {
	fmt.Fprintf(w, "plan %s: %s\n", p.ID, p.Summary)
	fmt.Fprintf(w, "state: %s", p.State)
	if n := p.NextStep(); n != "" && p.State != StateNew {
		fmt.Fprintf(w, " (next step: %s)", n)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "source: shard %d, %s/%s\n", p.Source.ShardID, p.Source.Addr(), p.Source.Schema)
	tgt := fmt.Sprintf("%s/%s", p.Target.Addr(), p.Target.Schema)
	if p.Target.ShardID > 0 {
		tgt = fmt.Sprintf("shard %d, %s", p.Target.ShardID, tgt)
	}
	fmt.Fprintf(w, "target: %s\n", tgt)
	for _, r := range p.Watched {
		if p.Options.MaxLagMS <= 0 {
			break // named, but no lag is watched
		}
		fmt.Fprintf(w, "replica watched (--max-lag %s): %s, a replica of the %s\n", p.Options.MaxLagMS.D(), r.Addr, r.Side)
	}

	if len(p.MovingKeys) > 0 {
		fmt.Fprintln(w, "\nkeys that move (rows over the sharded tables, counted at planning):")
		kw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(kw, "  KEY\tROWS")
		var total int64
		for _, k := range p.MovingKeys {
			fmt.Fprintf(kw, "  %s\t%d\n", k.Key, k.Rows)
			total += k.Rows
		}
		fmt.Fprintf(kw, "  total\t%d\n", total)
		kw.Flush()
	}
	fmt.Fprintln(w, "\ntables copied:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  TABLE\tKEY\tROWS (est.)\tSIZE (est.)\tROWS COPIED\tWHICH ROWS")
	var rows, size int64
	for _, t := range p.Copy {
		which := "all"
		if !t.Filter.All() {
			q, args := t.Filter.SQL(ident.Quote)
			which = mapdef.Render(q, args)
		}
		m := p.Checkpoints.Copy[t.Name]
		key := strings.Join(t.PK, ",")
		if t.Key != "" { // no primary key: the UNIQUE key that identifies its rows
			key += " (unique key " + ident.Quote(t.Key) + ")"
		}
		fmt.Fprintf(tw, "  %s\t%s\t~%d\t~%s\t%d\t%s\n", t.Name, key, t.EstRows, mib(t.EstBytes), m.Rows, which)
		rows += t.EstRows
		size += t.EstBytes
	}
	fmt.Fprintf(tw, "  total\t\t~%d\t~%s\t\t\n", rows, mib(size))
	tw.Flush()
	fmt.Fprintln(w, "  ~ estimate from table statistics (can be far off right after a load; 'shardctl status --exact' counts rows)")

	if len(p.Objects) > 0 || len(p.TargetTriggers) > 0 {
		fmt.Fprintln(w, "\nschema objects (docs/schema-objects.md):")
		for _, o := range p.Objects {
			fmt.Fprintf(w, "  %s: %s\n", o, objectFate(p, o))
		}
		for _, o := range p.TargetTriggers {
			fmt.Fprintf(w, "  target's %s: guarded while rows are copied into it, restored exactly at cutover or abort\n", o)
		}
	}

	if len(p.Translations) > 0 {
		fmt.Fprintln(w, "\ntranslated for the target's flavor (docs/servers.md):")
		for _, t := range p.Translations {
			fmt.Fprintf(w, "  %s\n", t)
		}
	}

	if len(p.KeyChecks) > 0 {
		fmt.Fprintln(w, "\nforeign keys without the shard key, checked on the rows (docs/schemas.md):")
		for _, k := range p.KeyChecks {
			fmt.Fprintf(w, "  %s: %d child rows read at %s, %d would leave their parent, %d would lose it\n", k.Key, k.Rows, k.When, k.Leaving, k.Orphaned)
		}
	}

	if c := p.Collisions; c != nil {
		scanned := strings.Join(c.Scanned, ", ")
		if scanned == "" {
			scanned = "no key to scan"
		}
		fmt.Fprintf(w, "\nkey collisions with the target's rows (scanned %s): none on %s", c.At.Format(time.RFC3339), scanned)
		if len(c.Skipped) > 0 {
			fmt.Fprintf(w, "; not scanned, they carry the shard column and the target has no row in the merged range: %s", strings.Join(c.Skipped, ", "))
		}
		fmt.Fprintln(w)
	}

	printCounters(w, p)

	fmt.Fprintln(w, "\nsteps:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i, s := range p.Steps {
		took := ""
		if !s.Ended.IsZero() && !s.Started.IsZero() {
			took = s.Ended.Sub(s.Started).Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "  %d. %s\t%s\t%s\t%s\n", i+1, s.Name, s.State, took, describeStep(p, s.Name))
		if s.Error != "" {
			fmt.Fprintf(tw, "  \t\terror: %s\t\t\n", s.Error)
		}
	}
	tw.Flush()

	if len(p.SQLPreview) > 0 {
		fmt.Fprintln(w, "\nstatements run against the shard map (each group is one transaction that bumps the version):")
		for _, q := range p.SQLPreview {
			fmt.Fprintf(w, "  %s\n", q)
		}
	}
	if len(p.Attempts) > 0 {
		fmt.Fprintln(w, "\ncutover attempts:")
		for i, a := range p.Attempts {
			fmt.Fprintf(w, "  %d. %s  blackout %.1f ms  %s\n", i+1, a.Started.Format(time.RFC3339), a.BlackoutM, a.Result)
			printBlockers(w, a)
		}
	}
	if len(p.DDL) > 0 {
		fmt.Fprintln(w, "\nschema changes carried (--on-ddl):")
		for i, d := range p.DDL {
			fmt.Fprintf(w, "  %d. %s  %s  %s at %s: %s\n", i+1, d.At.Format(time.RFC3339), d.Mode, d.Table, d.Position, d.Statement)
			if d.Note != "" {
				fmt.Fprintf(w, "       %s\n", d.Note)
			}
		}
	}
	PrintWindow(w, p)
	c := p.Checkpoints
	if !c.Start.IsZero() {
		fmt.Fprintf(w, "\ncheckpoints: start %s, applied %s", c.Start, c.Applied)
		if !c.Final.IsZero() {
			fmt.Fprintf(w, ", final %s", c.Final)
		}
		fmt.Fprintln(w)
	}
	if p.State == StateDone {
		r := p.Result
		fmt.Fprintf(w, "\nresult: %d rows copied, %d binlog row events applied, %d rows verified, %d rows cleaned up, blackout %.1f ms\n",
			r.RowsCopied, r.EventsApplied, r.RowsVerified, r.RowsDeleted, r.BlackoutMS)
	}
}

func describeStep(p *Plan, step string) string {
	switch step {
	case StepPreflight:
		return "check binlog (ROW, FULL image), primary keys, target empty, not the same server"
	case StepCreate:
		return "record the source binlog position; create the target schema and tables"
	case StepCopy:
		return "copy rows in primary-key chunks, tables in parallel"
	case StepCatchup:
		return "tail the binlog into the target until it is close behind"
	case StepVerify:
		if !p.Options.Verify {
			return "skipped (--no-verify)"
		}
		return "chunked checksums, source vs target"
	case StepFence:
		names := make([]string, len(p.Fence))
		for i, f := range p.Fence {
			names[i] = f.Name
		}
		return "mark the mappings offline, fence writes on " + strings.Join(names, ", ") + ", wait for the final position"
	case StepCutover:
		return "switch the shard map to the target and mark it online"
	case StepWindow:
		return "reverse window: tail the serving side back into the fenced copy until 'plan complete' or the window ends"
	case StepCleanup:
		if p.KeepSource {
			return "skipped: --keep-source leaves the source copy (fenced) for a manual check"
		}
		if p.DropSourceSchema {
			return "delete the source rows in chunks, then drop " + p.Source.Schema
		}
		return "delete the moved rows from the source in chunks, lift the fence"
	}
	return ""
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// objectFate says what the operation does with a source schema object.
func objectFate(p *Plan, o objdef.Object) string {
	into := p.Target.Schema
	if p.Source.Schema != p.Target.Schema {
		into += " (references to " + p.Source.Schema + " renamed)"
	}
	switch o.Kind {
	case objdef.Trigger:
		return "created in " + into + " at create, guarded (does not fire on shardctl's writes); its exact definition at cutover"
	case objdef.Event:
		if o.Enabled {
			return "created disabled in " + into + " at create; enabled at cutover"
		}
		return "created disabled in " + into + " at create (disabled on the source too)"
	}
	return "created in " + into + " at create, as it is (left alone if the target has one of that name)"
}

// printCounters lists the raises of the target's AUTO_INCREMENT counters
// (a merge, a key move), the ALTERs create runs on the target before the
// copy, and the counters past half their type's largest value.
func printCounters(w io.Writer, p *Plan) {
	head := false
	for _, c := range p.Counters {
		if c.RaiseTo == 0 {
			continue
		}
		if !head {
			fmt.Fprintln(w, "\nAUTO_INCREMENT counters raised on the target before the copy (docs/split-merge.md):")
			head = true
		}
		done := ""
		if c.Raised {
			done = " (done)"
		}
		fmt.Fprintf(w, "  ALTER TABLE %s AUTO_INCREMENT = %d;  -- %s: source's counter %d, target's %d; room for %d more ids of the source until the cutover%s\n",
			ident.Table(p.Target.Schema, c.Table), c.RaiseTo, c.Column, c.Source, c.Target, c.Margin, done)
	}
	if len(p.Counters) > 0 && p.Counters[0].Interleaved {
		fmt.Fprintln(w, "\nAUTO_INCREMENT counters: the servers interleave ids (auto_increment_increment/offset); nothing raised or carried.")
	}
	for _, c := range p.Counters {
		if c.Warning != "" {
			fmt.Fprintln(w, "WARNING: "+c.Warning)
		}
	}
}
