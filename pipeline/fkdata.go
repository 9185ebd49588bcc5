package pipeline

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shardctl/shardctl/chunk"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/tables"
)

// A foreign key between sharded tables that does not carry the shard key
// (Sakila's payment.rental_id -> rental.rental_id, an order line -> its order)
// is safe for a split exactly when no child row and its parent end on two
// sides of the split point. Only the rows can tell, so a split reads them: at
// planning (a crossing refuses the plan, nothing changed) and again at the
// verify step, before the fence, because the application writes on meanwhile
// (a crossing then stops the run before the cutover; it resumes once the rows
// are fixed). docs/schemas.md.

// ErrCrossing is a split that would separate child rows from their parents.
var ErrCrossing = errors.New("rows would end on another shard than the rows their foreign key references")

// keyCheckChunk is how many child rows one join reads: a short statement
// (tens of milliseconds), so no long read view holds back purge.
const keyCheckChunk = 50000

// keySamples is how many crossing rows a refusal names per key.
const keySamples = 10

// checkKeysOnData reads every such key of a split plan (none for a move or a
// merge) on the source db. It returns what it found per key, and a
// description of the crossing rows (empty when there are none). wait paces
// each chunk (nil: unpaced).
func checkKeysOnData(ctx context.Context, db *sql.DB, p *plans.Plan, when string, wait func(context.Context, int) error) ([]plans.KeyCheck, string, error) {
	if p.Operation != "split" {
		return nil, "", nil
	}
	fks, err := tables.ForeignKeys(ctx, db, p.Source.Schema)
	if err != nil {
		return nil, "", fmt.Errorf("foreign keys of %s: %w", p.Source.Schema, err)
	}
	_, onData := tables.CrossingKeys(p.Copy, fks, p.Source.Schema, p.Operation)
	var checks []plans.KeyCheck
	var found []string
	for _, k := range onData {
		kc, sample, err := checkKeyOnData(ctx, db, p, k, wait)
		if err != nil {
			return nil, "", fmt.Errorf("foreign key %s: %w", k, err)
		}
		kc.When = when
		checks = append(checks, kc)
		if n := kc.Leaving + kc.Orphaned; n > 0 {
			found = append(found, fmt.Sprintf("foreign key %s: %d child rows would move to the new shard without their parent and %d would stay while their parent moves; for example %s",
				k, kc.Leaving, kc.Orphaned, strings.Join(sample, ", ")))
		}
	}
	return checks, strings.Join(found, "; "), nil
}

// checkKeyOnData joins the child's rows, one primary-key chunk at a time,
// to their parents and keeps those whose shard keys fall on two sides of the
// split: the child's row filter (it moves) differs from its parent's.
func checkKeyOnData(ctx context.Context, db *sql.DB, p *plans.Plan, k tables.ForeignKey, wait func(context.Context, int) error) (plans.KeyCheck, []string, error) {
	kc := plans.KeyCheck{Key: k.String(), At: time.Now().UTC()}
	child, ok1 := tables.Find(p.Copy, k.Table)
	parent, ok2 := tables.Find(p.Copy, k.RefTable)
	if !ok1 || !ok2 {
		return kc, nil, fmt.Errorf("table %s or %s is not in the plan", k.Table, k.RefTable)
	}
	key, err := chunk.LoadKey(ctx, db, p.Source.Schema, child.Name, child.Index(), child.PK)
	if err != nil {
		return kc, nil, err
	}
	// The child's columns the join needs, read through a derived table so the
	// chunk's primary-key range stays on the child whatever names the parent has.
	cols := slices.Clone(child.PK)
	for _, c := range append(slices.Clone(k.Columns), child.ShardColumn) {
		if !slices.Contains(cols, c) {
			cols = append(cols, c)
		}
	}
	qual := func(alias string) func(string) string {
		return func(c string) string { return alias + "." + dbutil.QuoteIdent(c) }
	}
	list := func(alias string, cs []string) string {
		parts := make([]string, len(cs))
		for i, c := range cs {
			parts[i] = qual(alias)(c)
		}
		return strings.Join(parts, ", ")
	}
	on := make([]string, len(k.Columns))
	for i := range k.Columns {
		on[i] = qual("c")(k.Columns[i]) + " = " + qual("p")(k.RefColumns[i])
	}
	moves, moveArgs := child.Filter.SQL(qual("c"))
	parentMoves, parentArgs := parent.Filter.SQL(qual("p"))
	var sample []string
	var after []string
	for {
		if wait != nil {
			if err := wait(ctx, keyCheckChunk); err != nil {
				return kc, nil, err
			}
		}
		upper, full, err := chunk.Upper(ctx, db, key, after, "1=1", nil, keyCheckChunk)
		if err != nil {
			return kc, nil, err
		}
		if !full {
			upper = nil
		}
		rng, rngArgs, err := key.Range(after, upper)
		if err != nil {
			return kc, nil, err
		}
		q := "SELECT CONCAT_WS(',', " + list("c", child.PK) + "), CONCAT_WS(',', " + list("c", k.Columns) + "), " + moves +
			" FROM (SELECT " + dbutil.QuoteIdents(cols) + " FROM " + dbutil.Table(p.Source.Schema, child.Name) + " WHERE " + rng + ") AS c" +
			" JOIN " + dbutil.Table(p.Source.Schema, parent.Name) + " AS p ON " + strings.Join(on, " AND ") +
			" WHERE (" + moves + ") <> (" + parentMoves + ")"
		args := append(append(append(append([]any{}, moveArgs...), rngArgs...), moveArgs...), parentArgs...)
		if err := func() error {
			rows, err := db.QueryContext(ctx, q, args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var c, par string
				var leaves bool
				if err := rows.Scan(&c, &par, &leaves); err != nil {
					return err
				}
				side := "stays while its parent moves"
				if leaves {
					kc.Leaving++
					side = "moves while its parent stays"
				} else {
					kc.Orphaned++
				}
				if len(sample) < keySamples {
					sample = append(sample, fmt.Sprintf("%s (%s)=(%s) -> %s (%s)=(%s) %s", k.Table, strings.Join(child.PK, ","), c, k.RefTable, strings.Join(k.RefColumns, ","), par, side))
				}
			}
			return rows.Err()
		}(); err != nil {
			return kc, nil, fmt.Errorf("join %s to %s: %w", k.Table, k.RefTable, err)
		}
		if !full {
			var n int64
			if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+dbutil.Table(p.Source.Schema, child.Name)+" WHERE "+rng, rngArgs...).Scan(&n); err != nil {
				return kc, nil, err
			}
			kc.Rows += n
			return kc, sample, nil
		}
		kc.Rows += keyCheckChunk
		after = upper
	}
}

// recheckKeys reads the keys again before the fence (the verify step, which
// runs even when checksums are off): rows the application wrote since
// planning may cross now. A crossing stops the run, deterministically, with
// the rows named; 'plan resume' checks again once they are fixed.
func (r *runner) recheckKeys(ctx context.Context) error {
	checks, crossing, err := checkKeysOnData(ctx, r.src, r.p, plans.StepVerify, r.thr.Wait)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.p.KeyChecks = append(slices.DeleteFunc(r.p.KeyChecks, func(k plans.KeyCheck) bool { return k.When == plans.StepVerify }), checks...)
	r.mu.Unlock()
	if crossing != "" {
		return fmt.Errorf("%w: %s", ErrCrossing, crossing)
	}
	return nil
}
