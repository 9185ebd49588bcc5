package fkcheck

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardctl/shardctl/chunk"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/operation"
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

// keyCheckSessions is how many chunks of one key are joined at once.
const keyCheckSessions = 2

// CheckKeysOnData reads every such key of a split plan (none for a move or a
// merge) on the source db. It returns what it found per key, and a
// description of the crossing rows (empty when there are none). wait paces
// each chunk (nil: unpaced).
func CheckKeysOnData(ctx context.Context, db *sql.DB, p *plans.Plan, when string, wait func(context.Context, int) error) ([]plans.KeyCheck, string, error) {
	if !operation.Of(p.Operation).DividesKeys {
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
	j, err := newKeyJoin(ctx, db, p, k)
	if err != nil {
		return kc, nil, err
	}
	// One session walks the child's key and hands out chunk bounds (the
	// cheap part: a short index read each); keyCheckSessions join chunks
	// at once, since the joins are nearly all of the cost (about 1.4 us of
	// server CPU a child row; 10M child rows are some 15 CPU-s). Results
	// are folded in chunk order, so the samples named are the first ones.
	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	todo := make(chan *keyPiece)
	done := make(chan *keyPiece, keyCheckSessions)
	var wg sync.WaitGroup
	for range keyCheckSessions {
		wg.Go(func() {
			for pc := range todo {
				pc.err = j.check(ctx, pc)
				done <- pc
			}
		})
	}
	var walkErr error
	chunks := -1 // known once the walk ends
	go func() {
		defer close(todo)
		chunks, walkErr = j.walkChunks(ictx, wait, todo)
	}()
	go func() { wg.Wait(); close(done) }()
	got := map[int]*keyPiece{}
	var firstErr error
	for pc := range done {
		if pc.err != nil && firstErr == nil {
			firstErr = pc.err
			cancel()
		}
		got[pc.seq] = pc
	}
	// done is closed: the walk has ended (todo closed) and set chunks.
	if firstErr != nil {
		return kc, nil, firstErr
	}
	if walkErr != nil {
		return kc, nil, walkErr
	}
	var sample []string
	for seq := range chunks {
		pc := got[seq]
		kc.Rows += pc.rows
		kc.Leaving += pc.leaving
		kc.Orphaned += pc.orphaned
		if pc.joined {
			kc.Joined++
		}
		for _, s := range pc.sample {
			if len(sample) < keySamples {
				sample = append(sample, s)
			}
		}
	}
	return kc, sample, nil
}

// keyJoin is what the chunks of one key's check share: the tables, the
// join's SQL pieces, and how chunks are bounded and matched.
type keyJoin struct {
	db                   *sql.DB
	schema               string
	k                    tables.ForeignKey
	child, parent        tables.Table
	key                  chunk.Key
	cols, on             []string
	moves, parentMoves   string
	moveArgs, parentArgs []any
	byRange              bool
	walk                 *valueWalk  // nil: the key walk bounds the chunks
	mixed                atomic.Bool // matchByRange's: the last chunk's children were on both sides
}

// keyPiece is one chunk's join: its crossing rows counted, the first
// keySamples named.
type keyPiece struct {
	seq                     int
	rng                     string
	rngArgs                 []any
	last                    bool
	width                   int64 // the key values a value walk's chunk spans (0: open-ended, or a key walk's chunk)
	rows, leaving, orphaned int64
	joined                  bool
	sample                  []string
	err                     error
}

func newKeyJoin(ctx context.Context, db *sql.DB, p *plans.Plan, k tables.ForeignKey) (*keyJoin, error) {
	child, ok1 := tables.Find(p.Copy, k.Table)
	parent, ok2 := tables.Find(p.Copy, k.RefTable)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("table %s or %s is not in the plan", k.Table, k.RefTable)
	}
	key, err := chunk.LoadKey(ctx, db, p.Source.Schema, child.Name, child.Index(), child.PK)
	if err != nil {
		return nil, err
	}
	j := &keyJoin{db: db, schema: p.Source.Schema, k: k, child: child, parent: parent, key: key}
	// The child's columns the join needs, read through a derived table so the
	// chunk's primary-key range stays on the child whatever names the parent has.
	j.cols = slices.Clone(child.PK)
	for _, c := range append(slices.Clone(k.Columns), child.ShardColumn) {
		if !slices.Contains(j.cols, c) {
			j.cols = append(j.cols, c)
		}
	}
	j.on = make([]string, len(k.Columns))
	for i := range k.Columns {
		j.on[i] = keyQual("c")(k.Columns[i]) + " = " + keyQual("p")(k.RefColumns[i])
	}
	j.moves, j.moveArgs = child.Filter.SQL(keyQual("c"))
	j.parentMoves, j.parentArgs = parent.Filter.SQL(keyQual("p"))
	if j.byRange, err = rangeMatchable(ctx, db, p.Source.Schema, child, parent, k); err != nil {
		return nil, err
	}
	if j.byRange {
		if j.walk, err = newValueWalk(ctx, db, key); err != nil {
			return nil, fmt.Errorf("bounds of %s: %w", k.Table, err)
		}
	}
	return j, nil
}

// keyQual qualifies a column with a table alias.
func keyQual(alias string) func(string) string {
	return func(c string) string { return alias + "." + dbutil.QuoteIdent(c) }
}

// keyList is the columns cs qualified with alias, comma-separated.
func keyList(alias string, cs []string) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = keyQual(alias)(c)
	}
	return strings.Join(parts, ", ")
}

// join has the server join one chunk's children to their parents.
func (j *keyJoin) join(ctx context.Context, pc *keyPiece) error {
	k, child := j.k, j.child
	q := "SELECT CONCAT_WS(',', " + keyList("c", child.PK) + "), CONCAT_WS(',', " + keyList("c", k.Columns) + "), " + j.moves +
		" FROM (SELECT " + dbutil.QuoteIdents(j.cols) + " FROM " + dbutil.Table(j.schema, child.Name) + " WHERE " + pc.rng + ") AS c" +
		" JOIN " + dbutil.Table(j.schema, j.parent.Name) + " AS p ON " + strings.Join(j.on, " AND ") +
		" WHERE (" + j.moves + ") <> (" + j.parentMoves + ")"
	args := append(append(append(append([]any{}, j.moveArgs...), pc.rngArgs...), j.moveArgs...), j.parentArgs...)
	rows, err := j.db.QueryContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("join %s to %s: %w", k.Table, k.RefTable, err)
	}
	defer rows.Close()
	for rows.Next() {
		var c, par string
		var leaves bool
		if err := rows.Scan(&c, &par, &leaves); err != nil {
			return fmt.Errorf("join %s to %s: %w", k.Table, k.RefTable, err)
		}
		side := "stays while its parent moves"
		if leaves {
			pc.leaving++
			side = "moves while its parent stays"
		} else {
			pc.orphaned++
		}
		if len(pc.sample) < keySamples {
			pc.sample = append(pc.sample, fmt.Sprintf("%s (%s)=(%s) -> %s (%s)=(%s) %s", k.Table, strings.Join(child.PK, ","), c, k.RefTable, strings.Join(k.RefColumns, ","), par, side))
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("join %s to %s: %w", k.Table, k.RefTable, err)
	}
	pc.joined = true
	pc.rows = keyCheckChunk
	if pc.last {
		if err := j.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+dbutil.Table(j.schema, child.Name)+" WHERE "+pc.rng, pc.rngArgs...).Scan(&pc.rows); err != nil {
			return fmt.Errorf("count %s: %w", k.Table, err)
		}
	}
	return nil
}

// check matches a chunk by key range when the key allows it, and has the
// server join the chunks that range matching cannot settle (keys too
// sparse) or that cross (the join names the rows).
func (j *keyJoin) check(ctx context.Context, pc *keyPiece) error {
	known := int64(-1)
	if j.byRange {
		n, crossed, ok, err := matchByRange(ctx, j.db, j.schema, j.child, j.parent, j.k, j.moves, j.moveArgs, j.parentMoves, j.parentArgs, pc.rng, pc.rngArgs, &j.mixed)
		if err != nil {
			return fmt.Errorf("match %s to %s by key range: %w", j.k.Table, j.k.RefTable, err)
		}
		j.walk.read(pc.width, n)
		if ok && !crossed {
			pc.rows = n
			return nil
		}
		known = n
	}
	if err := j.join(ctx, pc); err != nil {
		return err
	}
	if known >= 0 {
		pc.rows = known
	}
	return nil
}

// walkChunks walks the child's key and hands each chunk to todo, paced by
// wait (nil: unpaced). It returns how many chunks it handed out, and why it
// stopped early.
func (j *keyJoin) walkChunks(ctx context.Context, wait func(context.Context, int) error, todo chan<- *keyPiece) (int, error) {
	var after []string
	for seq := 0; ; seq++ {
		if wait != nil {
			if err := wait(ctx, keyCheckChunk); err != nil {
				return seq, err
			}
		}
		var pc keyPiece
		var upper []string
		var full bool
		var err error
		if j.walk != nil {
			upper, full, pc.width, err = j.walk.chunk(after, func(n int) ([]string, bool, error) {
				return chunk.Upper(ctx, j.db, j.key, after, "1=1", nil, n)
			})
		} else {
			upper, full, err = chunk.Upper(ctx, j.db, j.key, after, "1=1", nil, keyCheckChunk)
		}
		if err == nil && !full {
			upper = nil
		}
		if err == nil {
			pc.rng, pc.rngArgs, err = j.key.Range(after, upper)
		}
		if err != nil {
			return seq, err
		}
		pc.seq, pc.last = seq, !full
		select {
		case todo <- &pc:
		case <-ctx.Done():
			return seq, ctx.Err()
		}
		if !full {
			return seq + 1, nil
		}
		after = upper
	}
}
