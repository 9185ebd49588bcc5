package pipeline

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shardctl/shardctl/binlog"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/operation"
	"github.com/shardctl/shardctl/pipeline/failure"
	"github.com/shardctl/shardctl/plans"
)

// A merge or a key move copies the source's rows, ids included, into a
// target that keeps serving and issuing ids of its own, while the source
// goes on issuing ids for the moving keys until the fence (the tail brings
// those rows over). InnoDB moves a counter past every id written into its
// table, so when the source's ids lie at or above the target's counter the
// copy drags the target's counter into the source's id space: while the
// copy and the tail run, the target hands out ids the source holds (not yet
// copied) or goes on issuing, and the tail's REPLACE of the source's row
// then removes the target's. The counters carried at the cutover
// (autoinc.go) cannot help: the harm is done before it.
//
// So the plan raises the target's counter, at create and before the copy,
// to the source's counter plus a margin: the source's ids stay below it
// until the cutover, the target's own above it. Raising again later cannot
// help (the target issues from the first raise on), so ahead of each
// cutover attempt idsApart checks that the source stayed below the target's
// counter. The margin is all the rule is about (docs/split-merge.md):
//
//   - a merge: the merged shard's counter itself (as many ids again as it
//     issued in its life), at least minCounterMargin. The merged shard goes
//     away, so this happens once to a shard's ids, and its copy is as long
//     as a whole shard's.
//   - a key move: keyMoveMargin, or as many ids as the source issues in
//     keyMoveHorizon at the pace it issued them between planning and
//     create, whichever is more. The source stays and keys may come back
//     (rebalance moves tenants again and again), so a margin the size of the
//     source's counter would double the counters at every move; this one
//     adds to the larger counter per move what the source's pace needs,
//     whatever the counters are.
//
// Either is at most half the room the column's type leaves. Servers that
// interleave ids (auto_increment_increment > 1, distinct offsets) never
// issue the same id: nothing is raised or carried.
const (
	minCounterMargin = 1_000_000
	keyMoveMargin    = 10_000
	keyMoveHorizon   = 10 * time.Minute
)

// keyMoveMarginFor is a key move's margin for a source that issued issued
// ids in the elapsed time between planning and create.
func keyMoveMarginFor(issued uint64, elapsed time.Duration) uint64 {
	if elapsed <= 0 {
		return keyMoveMargin
	}
	pace := float64(issued) * float64(keyMoveHorizon) / float64(elapsed)
	if pace >= 1<<62 {
		return 1 << 62 // clamped to the type's room by the caller
	}
	return max(keyMoveMargin, uint64(pace))
}

// keysMove reports whether p moves some keys of a shard into another
// existing shard, both shards staying.
func keysMove(p *plans.Plan) bool {
	o := operation.Of(p.Operation)
	return o.IntoExisting && o.DividesKeys
}

// planCounters records the copied tables with an AUTO_INCREMENT counter
// and, for a merge or a key move, the raise of the target's counters. A
// column whose type leaves no room for a margin is refused.
func planCounters(ctx context.Context, src, dst *sql.DB, p *plans.Plan) error {
	cols, err := counterColumns(ctx, src, p.Source.Schema)
	if err != nil {
		return failure.ProbeError("the AUTO_INCREMENT columns", "source", p.Source.Addr(), err)
	}
	var names []string
	for _, t := range p.Copy {
		if _, ok := cols[t.Name]; ok {
			names = append(names, t.Name)
		}
	}
	from, err := autoIncrements(ctx, src, p.Source.Schema, names)
	if err != nil {
		return failure.ProbeError("the AUTO_INCREMENT counters", "source", p.Source.Addr(), err)
	}
	p.Counters = []plans.Counter{}
	for _, n := range names {
		c := cols[n]
		c.Source = from[n]
		c.Warning = counterWarning(c, c.Source)
		p.Counters = append(p.Counters, c)
	}
	if !operation.Of(p.Operation).IntoExisting || len(names) == 0 {
		return nil
	}
	apart, err := interleaved(ctx, src, dst)
	if err != nil {
		return failure.ProbeError("auto_increment_increment and auto_increment_offset", "source and target", p.Source.Addr()+" / "+p.Target.Addr(), err)
	}
	if apart {
		for i := range p.Counters {
			p.Counters[i].Interleaved = true
		}
		return nil
	}
	meet, err := idsCanMeet(ctx, src, p)
	if err != nil {
		return failure.ProbeError("the AUTO_INCREMENT columns and unique keys", "source", p.Source.Addr(), err)
	}
	if len(meet) == 0 {
		return nil
	}
	into, err := autoIncrements(ctx, dst, p.Target.Schema, meet)
	if err != nil {
		return failure.ProbeError("the AUTO_INCREMENT counters", "target", p.Target.Addr(), err)
	}
	var bad []string
	for i := range p.Counters {
		c := &p.Counters[i]
		if !slices.Contains(meet, c.Table) {
			continue
		}
		c.Target = into[c.Table]
		to, margin, ok := targetRaise(keysMove(p), c.Source, c.Target, c.Max)
		if !ok {
			bad = append(bad, fmt.Sprintf("%s.%s (counter %d, its type's largest value %d)", c.Table, c.Column, c.Source, c.Max))
			continue
		}
		c.RaiseTo, c.Margin = to, margin
		c.Warning = counterWarning(*c, max(c.Source, c.Target, c.RaiseTo))
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: the target's AUTO_INCREMENT counter must go above every id shard %d issues until the cutover, and these columns' types leave no room for that above shard %d's counter: %s; widen the column (BIGINT) on both shards, then plan the %s again",
			ErrRefused, p.Source.ShardID, p.Source.ShardID, strings.Join(bad, "; "), p.Operation)
	}
	return nil
}

// targetRaise decides, for a source counter s, a target counter t and a
// column whose largest value is hi, where the target's counter goes before
// the copy (0: it stays, being above s plus the margin already) and the
// margin; keys marks a key move. ok is false when the type leaves no room
// for a margin. It never lowers a counter and, for a key move, never raises
// one by more than keyMoveMargin above the larger of the two.
func targetRaise(keys bool, s, t, hi uint64) (to, margin uint64, ok bool) {
	if s >= hi {
		return 0, 0, false
	}
	margin = max(s, minCounterMargin)
	if keys {
		margin = keyMoveMargin
	}
	margin = min(margin, (hi-s)/2)
	if margin == 0 {
		return 0, 0, false
	}
	if t >= s+margin {
		return 0, margin, true
	}
	return s + margin, margin, true
}

// counterWarning says when c's counter at level is past half its type's
// largest value; "" below that.
func counterWarning(c plans.Counter, level uint64) string {
	if c.Max == 0 || level <= c.Max/2 {
		return ""
	}
	pct := float64(level) / float64(c.Max) * 100
	soon := ""
	if level > c.Max/5*4 {
		soon = " soon"
	}
	return fmt.Sprintf("%s.%s: AUTO_INCREMENT counter at %d after this operation, %.0f%% of its type's largest value %d; widen the column (BIGINT)%s",
		c.Table, c.Column, level, pct, c.Max, soon)
}

// raiseTargetCounters raises, at create, the target's counters whose ids
// can meet the source's, from the live counters (the plan may be applied
// long after it was made: the source's counter moved, the margin stays),
// and records where they went and the guard the source must stay below.
func (r *runner) raiseTargetCounters(ctx context.Context) error {
	names, from, err := r.sourceCounters(ctx, func(c plans.Counter) bool { return c.Margin > 0 && !c.Raised })
	if err != nil || len(names) == 0 {
		return err
	}
	return r.raise(ctx, names, from)
}

// raiseOutrun raises again, before a tail starts, the target's counters
// whose source reached the guard: the source outran its margin (the tail
// stopped at such a row with binlog.ErrIDGuard, or the check ahead of a
// cutover found the counter there). The target may have issued ids from
// the old guard on for its own keys; a moving row that meets one of them
// stops the tail (binlog.ErrForeignRow) rather than replace it, so raising
// again loses nothing and keeps the ids the source issues next apart.
func (r *runner) raiseOutrun(ctx context.Context) error {
	names, from, err := r.sourceCounters(ctx, func(c plans.Counter) bool { return c.Raised && guard(c) > 0 })
	if err != nil || len(names) == 0 {
		return err
	}
	var outrun []string
	r.mu.Lock()
	for _, c := range r.p.Counters {
		if slices.Contains(names, c.Table) && from[c.Table] >= guard(c) {
			outrun = append(outrun, c.Table)
		}
	}
	r.mu.Unlock()
	if len(outrun) == 0 {
		return nil
	}
	r.env.Log.Warn("the source's AUTO_INCREMENT counters reached the target's raised counters: raising them again", "schema", r.p.Target.Schema, "tables", outrun)
	return r.raise(ctx, outrun, from)
}

// raise raises the target's counters of the tables names to the source's
// counters from plus a margin, and records the guard.
func (r *runner) raise(ctx context.Context, names []string, from map[string]uint64) error {
	into, err := autoIncrements(ctx, r.dst, r.p.Target.Schema, names)
	if err != nil {
		return err
	}
	to := map[string]uint64{}
	var raise, warnings []string
	r.mu.Lock()
	for i := range r.p.Counters {
		c := &r.p.Counters[i]
		if !slices.Contains(names, c.Table) {
			continue
		}
		s := from[c.Table]
		if keysMove(r.p) && s > c.Source && s < c.Max {
			// A busy source: more room, never less than planned.
			c.Margin = max(c.Margin, min(keyMoveMarginFor(s-c.Source, time.Since(r.p.CreatedAt)), (c.Max-s)/2))
		}
		if s >= c.Max || c.Max-s < c.Margin {
			r.mu.Unlock()
			return fmt.Errorf("table %s.%s: the source's AUTO_INCREMENT counter reached %d, too near its type's largest value %d to raise the target's %d above it", r.p.Target.Schema, c.Table, s, c.Max, c.Margin)
		}
		want := max(c.RaiseTo, s+c.Margin)
		c.RaiseTo, c.Guard = 0, into[c.Table]
		if c.Guard < want {
			c.RaiseTo, c.Guard = want, want
			to[c.Table] = want
			raise = append(raise, c.Table)
		}
		if c.Warning = counterWarning(*c, max(s, c.Guard)); c.Warning != "" {
			warnings = append(warnings, c.Warning)
		}
	}
	r.mu.Unlock()
	if err := raiseCounters(ctx, r.dst, r.p.Target.Schema, raise, to, r.p.Options.LockWaitMS.D()); err != nil {
		return err
	}
	r.mu.Lock()
	for i := range r.p.Counters {
		if slices.Contains(names, r.p.Counters[i].Table) {
			r.p.Counters[i].Raised = true
		}
	}
	r.mu.Unlock()
	if len(raise) > 0 {
		r.env.Log.Info("target's AUTO_INCREMENT counters raised", "schema", r.p.Target.Schema, "tables", raise, "to", to)
	}
	for _, w := range warnings {
		r.env.Log.Warn(w)
	}
	return r.save(true)
}

// sourceCounters reads the source's live counters of the plan's counters
// that keep says, and names them.
func (r *runner) sourceCounters(ctx context.Context, keep func(plans.Counter) bool) (names []string, from map[string]uint64, err error) {
	for _, c := range r.p.Counters {
		if keep(c) {
			names = append(names, c.Table)
		}
	}
	if len(names) == 0 {
		return nil, nil, nil
	}
	from, err = autoIncrements(ctx, r.src, r.p.Source.Schema, names)
	return names, from, err
}

// guard is the counter c's source must stay below until the cutover: the
// target's counter after create (a plan made before Guard was kept: where
// create raised it); 0 when nothing is guarded.
func guard(c plans.Counter) uint64 {
	if c.Guard == 0 && c.Raised {
		return c.RaiseTo
	}
	return c.Guard
}

// idGuards are the guards the tail's incoming rows stay below (nil: none).
func (r *runner) idGuards() map[string]binlog.IDGuard {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out map[string]binlog.IDGuard
	for _, c := range r.p.Counters {
		if g := guard(c); g > 0 {
			if out == nil {
				out = map[string]binlog.IDGuard{}
			}
			out[c.Table] = binlog.IDGuard{Column: c.Column, Guard: g}
		}
	}
	return out
}

// errIdsMet stops a merge or key move whose source issued ids up to the target's counter.
var errIdsMet = errors.New("the source's AUTO_INCREMENT ids reached the target's")

// idsApart checks, ahead of a cutover attempt, that the source's counters
// stayed below the target's after create.
func (r *runner) idsApart(ctx context.Context) error {
	_, from, err := r.sourceCounters(ctx, func(c plans.Counter) bool { return guard(c) > 0 })
	if err != nil {
		return err
	}
	for _, c := range r.p.Counters {
		if g := guard(c); g > 0 && from[c.Table] >= g {
			return fmt.Errorf("%w: table %s.%s: shard %d's counter is %d, at or past the target's %d after create, so ids from %d on may be on both shards; the cutover is stopped: 'plan resume' raises the target's counter again before its tail goes on (a moving row with an id the target holds for its own keys stops the move, naming both rows), or 'plan abort' removes the copied rows",
				errIdsMet, r.p.Source.Schema, c.Table, r.p.Source.ShardID, from[c.Table], g, g)
		}
	}
	return nil
}

// idsCanMeet lists the copied tables where the two shards' issued ids can
// meet: an AUTO_INCREMENT column in a unique key without the shard column
// (a key that has the shard column never holds two shards' rows alike, so
// their ids may repeat: (emp_no, seq) keys of a per-employee counter).
func idsCanMeet(ctx context.Context, db *sql.DB, p *plans.Plan) ([]string, error) {
	auto := map[string]string{} // table: its AUTO_INCREMENT column
	var tb, col, idx string
	if err := dbutil.ScanEach(ctx, db, "SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND EXTRA LIKE '%auto_increment%'",
		[]any{p.Source.Schema}, []any{&tb, &col}, func() error { auto[tb] = col; return nil }); err != nil {
		return nil, err
	}
	if len(auto) == 0 {
		return nil, nil
	}
	keys := map[string]map[string][]string{} // table: unique key: columns
	if err := dbutil.ScanEach(ctx, db, "SELECT TABLE_NAME, INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND NON_UNIQUE = 0",
		[]any{p.Source.Schema}, []any{&tb, &idx, &col}, func() error {
			if keys[tb] == nil {
				keys[tb] = map[string][]string{}
			}
			keys[tb][idx] = append(keys[tb][idx], col)
			return nil
		}); err != nil {
		return nil, err
	}
	var out []string
	for _, t := range p.Copy {
		a, ok := auto[t.Name]
		if !ok {
			continue
		}
		for _, cols := range keys[t.Name] {
			if slices.ContainsFunc(cols, func(c string) bool { return strings.EqualFold(c, a) }) &&
				(t.ShardColumn == "" || !slices.ContainsFunc(cols, func(c string) bool { return strings.EqualFold(c, t.ShardColumn) })) {
				out = append(out, t.Name)
				break
			}
		}
	}
	return out, nil
}

// interleaved reports whether the two servers issue ids from disjoint
// residue classes (the same auto_increment_increment above 1, different
// offsets), the usual way to keep shards' ids apart.
func interleaved(ctx context.Context, src, dst *sql.DB) (bool, error) {
	read := func(db *sql.DB) (inc, off uint64, err error) {
		err = db.QueryRowContext(ctx, "SELECT @@GLOBAL.auto_increment_increment, @@GLOBAL.auto_increment_offset").Scan(&inc, &off)
		return inc, off, err
	}
	si, so, err := read(src)
	if err != nil {
		return false, err
	}
	ti, to, err := read(dst)
	if err != nil {
		return false, err
	}
	return si > 1 && si == ti && so%si != to%ti, nil
}
