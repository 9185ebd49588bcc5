// Package doctor finds what a fault leaves half-finished when no shardctl
// is there to resume it: plans stopped with nobody running them, reverse
// windows past their end, fence triggers and offline mappings no plan owns,
// copies no location names, lock rows of dead holders, and plan files that
// disagree with their plans-table row. Each finding names the command that
// ends it; Fix does those that cannot lose data.
package doctor

import (
	"fmt"
	"strings"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
)

// Kinds of finding.
const (
	KindPlanStopped   = "plan-stopped"    // an unfinished plan no process runs
	KindWindowExpired = "window-expired"  // a reverse window past its end, no process running it
	KindPlanCopies    = "plan-copies"     // the plan file and its plans-table row disagree
	KindFence         = "fence-left"      // fence triggers on a serving shard no plan owns
	KindOffline       = "mapping-offline" // offline mappings of a shard no plan owns
	KindCopy          = "copy-left"       // a shard-shaped schema no location names and no plan owns
	KindLockDead      = "lock-dead"       // a shard lock held by a session whose process is gone
	KindLockRow       = "lock-row"        // a holder row of a lock nobody holds
	KindUnreachable   = "server-unreachable"
)

// Facts is everything doctor reads, gathered by Read; Classify judges it
// without a database.
type Facts struct {
	Now     time.Time
	Map     *shardmap.Map
	Plans   []PlanFacts
	Servers []ServerFacts
	Locks   []LockFacts
	// StoreOK is false when the plans table could not be read: file-only
	// plans are then not reported as missing their row.
	StoreOK bool
}

// PlanFacts is one plan of this shard map: its file and its plans-table
// row (either may be nil), the later of the two, and whether a process
// holds its locks now.
type PlanFacts struct {
	Plan    *plans.Plan
	File    *plans.Plan
	Row     *plans.Plan
	Path    string
	Running bool
}

// ServerFacts is one server of the fleet: the schemas on it whose names the
// shard map or a plan uses, and the fence triggers in them.
type ServerFacts struct {
	Addr    string
	Error   string
	Schemas []string
	Fences  []FenceFacts
}

// FenceFacts is one schema's fence triggers: the tables they are on, and
// whether they fence writes now (an armed fence with its row unset does not).
type FenceFacts struct {
	Schema string
	Tables []string
	Fenced bool
}

// LockFacts is one row of the locks table and what the server says of it.
type LockFacts struct {
	Name   string
	Holder string
	ConnID int64
	Held   bool   // the recorded session holds the lock now
	Dead   string // why the holding session's process is gone ("" alive)
}

// Finding is one half-finished state and the command that ends it.
type Finding struct {
	Kind        string `json:"kind"`
	ShardID     int    `json:"shard_id,omitempty"`
	PlanID      string `json:"plan_id,omitempty"`
	Server      string `json:"server,omitempty"`
	Schema      string `json:"schema,omitempty"`
	What        string `json:"what"`
	Command     string `json:"command"`               // the command that ends it
	Alternative string `json:"alternative,omitempty"` // another way out
	Fixable     bool   `json:"fixable"`               // --fix ends it
	// Info: worth knowing, not half-finished (a free lock's leftover row
	// blocks nothing: the next holder overwrites it); doctor still exits 0.
	Info     bool   `json:"info,omitempty"`
	Fixed    bool   `json:"fixed,omitempty"`
	FixError string `json:"fix_error,omitempty"`

	tables []string   // fence: the fenced tables
	lock   LockFacts  // lock findings
	plan   *PlanFacts // plan-copies
}

// FixCommand is the command of a finding --fix ends.
const FixCommand = "shardctl doctor --fix"

// endpoint is a schema on a server.
type endpoint struct{ addr, schema string }

func ep(e plans.Endpoint) endpoint { return endpoint{e.Addr(), e.Schema} }

func locEP(l shardmap.Location) endpoint { return endpoint{l.Addr().String(), l.Schema} }

// unfinished reports a plan that started and has not ended: a plan file
// written for review (--plan-out) and never applied is not half-finished.
func unfinished(p *plans.Plan) bool {
	if p.State == plans.StateDone || p.State == plans.StateAborted {
		return false
	}
	return !(p.State == plans.StateNew && p.Untouched())
}

// Owned is what the unfinished plans own: their shards and both their
// endpoints. Whatever they own is theirs to finish (resume or abort), not
// doctor's.
type Owned struct {
	Shards    map[int]string      // shard id -> plan id
	Endpoints map[endpoint]string // (server, schema) -> plan id
}

// Owners lists what each unfinished plan owns.
func Owners(ps []*plans.Plan) Owned {
	o := Owned{Shards: map[int]string{}, Endpoints: map[endpoint]string{}}
	for _, p := range ps {
		if !unfinished(p) {
			continue
		}
		for _, id := range []int{p.Source.ShardID, p.Target.ShardID} {
			if id > 0 {
				o.Shards[id] = p.ID
			}
		}
		o.Endpoints[ep(p.Source)] = p.ID
		if p.Target.Host != "" {
			o.Endpoints[ep(p.Target)] = p.ID
		}
	}
	return o
}

// Classify lists every half-finished state in f, in a stable order: plans
// first, then the fleet's servers, then locks.
func Classify(f *Facts) []Finding {
	var all []*plans.Plan
	for _, pf := range f.Plans {
		all = append(all, pf.Plan)
	}
	owned := Owners(all)
	var out []Finding
	for i := range f.Plans {
		out = append(out, planFindings(f, &f.Plans[i])...)
	}
	out = append(out, fleetFindings(f, owned)...)
	out = append(out, lockFindings(f.Locks)...)
	return out
}

// planFindings are one plan's: stopped with nobody running it, a window
// past its end, copies that disagree.
func planFindings(f *Facts, pf *PlanFacts) []Finding {
	p := pf.Plan
	var out []Finding
	if pf.Running {
		return nil // its process finishes it, window included
	}
	switch {
	case !unfinished(p):
	case p.InWindow() && !p.Window.Until.IsZero() && f.Now.After(p.Window.Until):
		out = append(out, Finding{Kind: KindWindowExpired, ShardID: p.Source.ShardID, PlanID: p.ID,
			What: fmt.Sprintf("plan %s (%s): its reverse window ended at %s and no process runs it; the %s serves, the other copy is still fenced and kept in step by nothing",
				p.ID, p.Summary, p.Window.Until.Format(time.RFC3339), p.Window.Serving),
			Command:     "shardctl plan complete " + p.ID,
			Alternative: "shardctl plan revert " + p.ID + " (switch back to the source first)"})
	default:
		state := "stopped"
		if p.State == plans.StateRunning {
			state = "left running (its process is gone)"
		}
		what := fmt.Sprintf("plan %s (%s) %s at %s, and no process runs it", p.ID, p.Summary, state, p.AtStep())
		if left := heldBy(f, p); left != "" {
			what += "; it holds " + left
		}
		fd := Finding{Kind: KindPlanStopped, ShardID: p.Source.ShardID, PlanID: p.ID, What: what, Command: "shardctl plan resume " + p.ID}
		if !p.CutOver() {
			fd.Alternative = "shardctl plan abort " + p.ID + " (undo it)"
		}
		out = append(out, fd)
	}
	if d := copiesDiffer(f, pf); d != "" {
		out = append(out, Finding{Kind: KindPlanCopies, ShardID: p.Source.ShardID, PlanID: p.ID, What: d, Command: FixCommand, Fixable: true, plan: pf})
	}
	return out
}

// heldBy describes what a stopped plan leaves fenced or offline.
func heldBy(f *Facts, p *plans.Plan) string {
	var held []string
	for _, s := range f.Servers {
		for _, fc := range s.Fences {
			if (endpoint{s.Addr, fc.Schema} == ep(p.Source) || endpoint{s.Addr, fc.Schema} == ep(p.Target)) && fc.Fenced {
				held = append(held, fmt.Sprintf("%s/%s fenced (%d tables)", s.Addr, fc.Schema, len(fc.Tables)))
			}
		}
	}
	if f.Map != nil {
		for _, id := range []int{p.Source.ShardID, p.Target.ShardID} {
			if n := offline(f.Map, id); id > 0 && n > 0 {
				held = append(held, fmt.Sprintf("shard %d's mappings offline (%d)", id, n))
			}
		}
	}
	return strings.Join(held, ", ")
}

func offline(m *shardmap.Map, id int) int {
	n := 0
	for _, mp := range m.ShardMappings(id) {
		if mp.Status == shardmap.Offline {
			n++
		}
	}
	return n
}

// copiesDiffer says how a plan's file and its row disagree ("" when they
// agree, or when one of them is expected to be missing).
func copiesDiffer(f *Facts, pf *PlanFacts) string {
	file, row := pf.File, pf.Row
	switch {
	case file == nil:
		return "" // a plan run from another host has no file here
	case row == nil:
		if !f.StoreOK || (file.State == plans.StateNew && file.Untouched()) {
			return ""
		}
		return fmt.Sprintf("plan %s: the file %s (revision %d, %s) has no row in the plans table: other hosts cannot see it; --fix stores the file's copy", file.ID, pf.Path, file.Revision, file.State)
	case file.Revision == row.Revision && file.State == row.State:
		return ""
	}
	later := "the file's"
	if planLater(row, file) {
		later = "the row's"
	}
	return fmt.Sprintf("plan %s: the file %s is at revision %d (%s), the plans-table row at revision %d (%s); --fix writes %s copy (the later) over the other", file.ID, pf.Path, file.Revision, file.State, row.Revision, row.State, later)
}

// planLater reports whether a is the later copy of a plan than b.
func planLater(a, b *plans.Plan) bool {
	if a.Revision != b.Revision {
		return a.Revision > b.Revision
	}
	return a.UpdatedAt.After(b.UpdatedAt)
}

// fleetFindings are the servers': fences and copies no plan owns, offline
// mappings of shards no plan owns, servers that could not be read.
func fleetFindings(f *Facts, owned Owned) []Finding {
	var out []Finding
	serving := map[endpoint]shardmap.Location{}
	if f.Map != nil {
		for _, l := range f.Map.Locations {
			serving[locEP(l)] = l
		}
	}
	present := map[endpoint]bool{}
	lifted := map[int]bool{} // shards whose fence --fix lifts
	for _, s := range f.Servers {
		if s.Error != "" {
			out = append(out, Finding{Kind: KindUnreachable, Server: s.Addr, What: "could not read server " + s.Addr + ": " + s.Error,
				Command: "make the server reachable, then run shardctl doctor again"})
			continue
		}
		for _, sc := range s.Schemas {
			present[endpoint{s.Addr, sc}] = true
		}
		for _, fc := range s.Fences {
			e := endpoint{s.Addr, fc.Schema}
			if _, ok := owned.Endpoints[e]; ok {
				continue // its plan's finding names it
			}
			l, ok := serving[e]
			if !ok {
				continue // a copy no location names: copy-left names it
			}
			if _, ok := owned.Shards[l.ShardID]; ok {
				continue
			}
			state := "armed, not fencing"
			if fc.Fenced {
				state = "failing writes"
			}
			what := fmt.Sprintf("fence triggers (%s) on %s", state, strings.Join(fc.Tables, ", "))
			if len(fc.Tables) == 0 {
				what = "the fence table " + dbutil.FenceTable + " without its triggers"
			}
			lifted[l.ShardID] = true
			out = append(out, Finding{Kind: KindFence, ShardID: l.ShardID, Server: s.Addr, Schema: fc.Schema,
				What: fmt.Sprintf("shard %d's serving copy %s/%s carries %s, and no unfinished plan owns the shard; --fix drops them",
					l.ShardID, s.Addr, fc.Schema, what),
				Command: FixCommand, Fixable: true, tables: fc.Tables})
		}
	}
	if f.Map != nil {
		for _, l := range f.Map.Locations {
			n := offline(f.Map, l.ShardID)
			if n == 0 {
				continue
			}
			if _, ok := owned.Shards[l.ShardID]; ok {
				continue
			}
			fd := Finding{Kind: KindOffline, ShardID: l.ShardID, Server: l.Addr().String(), Schema: l.Schema,
				What:    fmt.Sprintf("shard %d has %d mapping(s) offline and no unfinished plan owns it: applications are told to retry its keys forever", l.ShardID, n),
				Command: fmt.Sprintf("shardctl shardmap set-status --shard %d online", l.ShardID)}
			// Online is safe when the one location is there to serve: the
			// schema exists on its server (and its fence, if any, goes first).
			if present[locEP(l)] {
				fd.Fixable, fd.Command = true, FixCommand
				fd.What += "; --fix puts them online"
				if lifted[l.ShardID] {
					fd.What += " after lifting its fence"
				}
			} else if reachable(f, l.Addr().String()) {
				fd.What += fmt.Sprintf("; its schema %s is missing on %s, so --fix leaves it", l.Schema, l.Addr())
			}
			out = append(out, fd)
		}
	}
	out = append(out, copies(f, owned, serving)...)
	return out
}

func reachable(f *Facts, addr string) bool {
	for _, s := range f.Servers {
		if s.Addr == addr {
			return s.Error == ""
		}
	}
	return false
}

// copies are the schemas a plan made or left (its endpoints) that no
// location names and no unfinished plan owns. Only shardctl's own work
// is judged (a schema some plan of this shard map names), and never
// dropped by --fix: a person checks it first.
func copies(f *Facts, owned Owned, serving map[endpoint]shardmap.Location) []Finding {
	by := map[endpoint]*plans.Plan{} // the latest ended plan naming each endpoint
	kept := map[endpoint]bool{}
	for _, pf := range f.Plans {
		p := pf.Plan
		if unfinished(p) {
			continue
		}
		if p.State == plans.StateDone && p.KeepSource {
			kept[ep(p.Source)] = true // kept on request
		}
		for _, e := range []plans.Endpoint{p.Source, p.Target} {
			if e.Host == "" {
				continue
			}
			if q := by[ep(e)]; q == nil || p.UpdatedAt.After(q.UpdatedAt) {
				by[ep(e)] = p
			}
		}
	}
	var out []Finding
	for _, s := range f.Servers {
		for _, sc := range s.Schemas {
			e := endpoint{s.Addr, sc}
			p := by[e]
			if p == nil || kept[e] {
				continue
			}
			if _, ok := serving[e]; ok {
				continue
			}
			if _, ok := owned.Endpoints[e]; ok {
				continue
			}
			out = append(out, Finding{Kind: KindCopy, ShardID: p.Source.ShardID, PlanID: p.ID, Server: s.Addr, Schema: sc,
				What: fmt.Sprintf("schema %s on %s was used by plan %s (%s, %s), and no location names it and no unfinished plan owns it: a copy left behind",
					sc, s.Addr, p.ID, p.Summary, p.State),
				Command: fmt.Sprintf("check it holds nothing you need, then on %s: DROP DATABASE %s", s.Addr, dbutil.QuoteIdent(sc))})
		}
	}
	return out
}

// lockFindings are the locks table's: a lock held by a session whose
// process is gone, and rows of locks nobody holds.
func lockFindings(ls []LockFacts) []Finding {
	var out []Finding
	for _, l := range ls {
		switch {
		case l.Held && l.Dead != "":
			out = append(out, Finding{Kind: KindLockDead, What: fmt.Sprintf("lock %s is held by %s (session %d), whose process is gone (%s): no operation on the shard can start; --fix ends the session",
				l.Name, l.Holder, l.ConnID, l.Dead), Command: FixCommand, Fixable: true, lock: l})
		case !l.Held:
			// What a killed holder (a rebalance --apply, kill -9) leaves: the
			// server freed the lock with the session, so nothing waits on it.
			out = append(out, Finding{Kind: KindLockRow, What: fmt.Sprintf("lock %s is free, but its row still names %s (session %d) as the holder; it blocks nothing (the next holder replaces it), and --fix deletes it",
				l.Name, l.Holder, l.ConnID), Command: FixCommand, Fixable: true, Info: true, lock: l})
		}
	}
	return out
}
