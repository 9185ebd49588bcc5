package pipeline

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
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

// checkKeysOnData reads every such key of a split plan (none for a move or a
// merge) on the source db. It returns what it found per key, and a
// description of the crossing rows (empty when there are none). wait paces
// each chunk (nil: unpaced).
func checkKeysOnData(ctx context.Context, db *sql.DB, p *plans.Plan, when string, wait func(context.Context, int) error) ([]plans.KeyCheck, string, error) {
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
	// One chunk's join: its crossing rows counted, the first keySamples named.
	type piece struct {
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
	byRange, err := rangeMatchable(ctx, db, p.Source.Schema, child, parent, k)
	if err != nil {
		return kc, nil, err
	}
	join := func(pc *piece) error {
		q := "SELECT CONCAT_WS(',', " + list("c", child.PK) + "), CONCAT_WS(',', " + list("c", k.Columns) + "), " + moves +
			" FROM (SELECT " + dbutil.QuoteIdents(cols) + " FROM " + dbutil.Table(p.Source.Schema, child.Name) + " WHERE " + pc.rng + ") AS c" +
			" JOIN " + dbutil.Table(p.Source.Schema, parent.Name) + " AS p ON " + strings.Join(on, " AND ") +
			" WHERE (" + moves + ") <> (" + parentMoves + ")"
		args := append(append(append(append([]any{}, moveArgs...), pc.rngArgs...), moveArgs...), parentArgs...)
		rows, err := db.QueryContext(ctx, q, args...)
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
			if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+dbutil.Table(p.Source.Schema, child.Name)+" WHERE "+pc.rng, pc.rngArgs...).Scan(&pc.rows); err != nil {
				return fmt.Errorf("count %s: %w", k.Table, err)
			}
		}
		return nil
	}
	// One session walks the child's key and hands out chunk bounds (the
	// cheap part: a short index read each); keyCheckSessions join chunks
	// at once, since the joins are nearly all of the cost (about 1.4 us of
	// server CPU a child row; 10M child rows are some 15 CPU-s). Results
	// are folded in chunk order, so the samples named are the first ones.
	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	todo := make(chan *piece)
	done := make(chan *piece, keyCheckSessions)
	var wg sync.WaitGroup
	var walk *valueWalk
	var mixed atomic.Bool // matchByRange's: the last chunk's children were on both sides
	if byRange {
		if walk, err = newValueWalk(ctx, db, key); err != nil {
			return kc, nil, fmt.Errorf("bounds of %s: %w", k.Table, err)
		}
	}
	// check matches a chunk by key range when the key allows it, and has the
	// server join the chunks that range matching cannot settle (keys too
	// sparse) or that cross (the join names the rows).
	check := func(pc *piece) error {
		known := int64(-1)
		if byRange {
			n, crossed, ok, err := matchByRange(ctx, db, p.Source.Schema, child, parent, k, moves, moveArgs, parentMoves, parentArgs, pc.rng, pc.rngArgs, &mixed)
			if err != nil {
				return fmt.Errorf("match %s to %s by key range: %w", k.Table, k.RefTable, err)
			}
			walk.read(pc.width, n)
			if ok && !crossed {
				pc.rows = n
				return nil
			}
			known = n
		}
		if err := join(pc); err != nil {
			return err
		}
		if known >= 0 {
			pc.rows = known
		}
		return nil
	}
	for range keyCheckSessions {
		wg.Go(func() {
			for pc := range todo {
				pc.err = check(pc)
				done <- pc
			}
		})
	}
	var walkErr error
	chunks := -1 // known once the walk ends
	go func() {
		defer close(todo)
		var after []string
		for seq := 0; ; seq++ {
			if wait != nil {
				if walkErr = wait(ictx, keyCheckChunk); walkErr != nil {
					chunks = seq
					return
				}
			}
			var pc piece
			var upper []string
			var full bool
			var err error
			if walk != nil {
				upper, full, pc.width, err = walk.chunk(after, func(n int) ([]string, bool, error) {
					return chunk.Upper(ictx, db, key, after, "1=1", nil, n)
				})
			} else {
				upper, full, err = chunk.Upper(ictx, db, key, after, "1=1", nil, keyCheckChunk)
			}
			if err == nil && !full {
				upper = nil
			}
			if err == nil {
				pc.rng, pc.rngArgs, err = key.Range(after, upper)
			}
			if err != nil {
				walkErr, chunks = err, seq
				return
			}
			pc.seq, pc.last = seq, !full
			select {
			case todo <- &pc:
			case <-ictx.Done():
				walkErr, chunks = ictx.Err(), seq
				return
			}
			if !full {
				chunks = seq + 1
				return
			}
			after = upper
		}
	}()
	go func() { wg.Wait(); close(done) }()
	got := map[int]*piece{}
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

// Matching by key range. Joining a chunk costs the server an index lookup of
// the parent per child row (about 1.5 us of server CPU a row here), nearly
// all of the check. When the key is one integer column referencing the
// parent's one-column integer primary key, and a chunk's children reference
// a narrow range of parents (as children written after their parents do),
// the server reads the chunk's children and that range of parents in key
// order instead, both in one snapshot: it sums up each side when the
// chunk's children are all on one side (as when the shard key grows with
// the child's primary key), and shardctl matches their lists otherwise. A
// chunk whose parents are spread wider than rangeSpan times its rows, or in
// which a crossing is found, is joined by the server as before (the join
// counts and names the rows).

// rangeSpan bounds the parents read for a chunk, per child row.
const rangeSpan = 8

// rangeMatchable reports whether key k can be matched by key range.
func rangeMatchable(ctx context.Context, db *sql.DB, schema string, child, parent tables.Table, k tables.ForeignKey) (bool, error) {
	if len(k.Columns) != 1 || len(parent.PK) != 1 || k.RefColumns[0] != parent.PK[0] {
		return false, nil
	}
	cc, err := chunk.Probe(ctx, db, schema, child.Name, k.Columns)
	if err != nil {
		return false, fmt.Errorf("probe %s: %w", child.Name, err)
	}
	pc, err := chunk.Probe(ctx, db, schema, parent.Name, parent.PK)
	if err != nil {
		return false, fmt.Errorf("probe %s: %w", parent.Name, err)
	}
	return fitsInt64(cc[0]) && fitsInt64(pc[0]), nil
}

// fitsInt64 reports whether every value of c is an int64 (what shardctl
// matches and walks keys on): integers, but not an unsigned BIGINT.
func fitsInt64(c chunk.Column) bool {
	return c.Kind == chunk.Signed || c.Kind == chunk.Unsigned && !strings.Contains(c.Type, "BIGINT")
}

// keyListMax is the session's group_concat_max_len while a chunk's lists
// are read: a chunk's list holds up to (rangeSpan+1) * 50,000 keys of up to
// 20 bytes. A list this long may have been cut short (the server cuts it at
// exactly this many bytes, possibly inside a key): the chunk is then joined.
var keyListMax = 16 << 20

// matchByRange reports the chunk's children read and whether any child and
// its parent are on two sides, reading in one read-only snapshot. ok is
// false when the parents are too spread (or a list came back cut short):
// the chunk is then joined.
//
// First the server sums up the chunk's children: their key's bounds, and
// how many of them move out of how many have a side. When those with a side
// are all on one side, the parents in the range the children reference are
// summed up the same way, and parents all on that side (or without one)
// settle the chunk without a list. Otherwise shardctl matches lists: the
// keys of the children that move and of those that stay, each one
// GROUP_CONCAT of plain integers (one list of KEY*2+side would overflow on
// a BIGINT key), and the parents' the same way. Read row by row through the
// driver, shardctl spent as much CPU on the rows as the server saved.
// Server CPU per chunk, against the lists of CONCAT(key, side letter) used
// before: the sums about half on MySQL 9.7 (0.4-0.7 on MariaDB 10.11); the
// two integer lists 0.8-0.9 on MySQL but about 1.1 on MariaDB (one list of
// KEY*2+side: 0.6-0.9 and about 1.0). A child or parent whose side is NULL
// is in neither list and crosses nothing, as in the join. mixed is shared
// by the key's chunks: set when a chunk's children were on both sides, so
// the next chunk reads its children's lists at once (children mixed
// throughout pay for no sums).
func matchByRange(ctx context.Context, db *sql.DB, schema string, child, parent tables.Table, k tables.ForeignKey,
	moves string, moveArgs []any, parentMoves string, parentArgs []any, rng string, rngArgs []any, mixed *atomic.Bool) (n int64, crossed, ok bool, err error) {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return 0, false, false, err
	}
	defer func() { _ = tx.Rollback() }()
	fk, pk := "c."+dbutil.QuoteIdent(k.Columns[0]), "p."+dbutil.QuoteIdent(parent.PK[0])
	kidsFrom := dbutil.Table(schema, child.Name) + " AS c WHERE " + rng
	kidArgs := append(append(append([]any{}, moveArgs...), moveArgs...), rngArgs...)
	parentsFrom := dbutil.Table(schema, parent.Name) + " AS p WHERE " + pk + " >= ? AND " + pk + " <= ?"
	parentArgsOf := func(lo, hi int64) []any {
		return append(append(append([]any{}, parentArgs...), parentArgs...), lo, hi)
	}
	// sums reads how many rows of from move (side true) and how many have a
	// side, after the columns of sel into dest.
	sums := func(sel, side, from string, args []any, dest ...any) (moving, sided int64, err error) {
		var m sql.NullInt64
		err = tx.QueryRowContext(ctx, "SELECT "+sel+"SUM("+side+"), COUNT("+side+") FROM "+from, args...).Scan(append(dest, &m, &sided)...)
		return m.Int64, sided, err
	}
	// lists reads the keys of the rows of from that move and of those that
	// stay, after the columns of sel into dest; full is false when one may
	// have been cut short.
	setMax := false
	lists := func(sel, key, side, from string, args []any, dest ...any) (move, stay []byte, full bool, err error) {
		if !setMax {
			if _, err := tx.ExecContext(ctx, "SET SESSION group_concat_max_len = "+strconv.Itoa(keyListMax)); err != nil {
				return nil, nil, false, err
			}
			setMax = true
		}
		q := "SELECT " + sel + "GROUP_CONCAT(IF(" + side + ", " + key + ", NULL)), GROUP_CONCAT(IF(NOT (" + side + "), " + key + ", NULL)) FROM " + from
		err = tx.QueryRowContext(ctx, q, args...).Scan(append(dest, &move, &stay)...)
		return move, stay, len(move) < keyListMax && len(stay) < keyListMax, err
	}
	// The children's one side: stays (0), moves (1), or both (2).
	sideOf := func(moving, sided int64) int {
		switch moving {
		case 0:
			return 0
		case sided:
			return 1
		}
		return 2
	}
	var lo, hi int64
	side := 2
	var kids []kid // the children's keys, once listed
	listed := false
	// readKids lists the children; false: cut short.
	readKids := func() (bool, error) {
		move, stay, full, err := lists("COUNT(*), ", fk, moves, kidsFrom, kidArgs, &n)
		if err != nil || !full {
			return false, err
		}
		kids, listed = kids[:0], true
		lo, hi = math.MaxInt64, math.MinInt64
		var m int64
		add := func(moves bool) func(int64) bool {
			return func(ref int64) bool {
				kids = append(kids, kid{ref, moves})
				lo, hi = min(lo, ref), max(hi, ref)
				if moves {
					m++
				}
				return true
			}
		}
		if !eachInt(move, add(true)) || !eachInt(stay, add(false)) {
			return false, nil
		}
		side = sideOf(m, int64(len(kids)))
		mixed.Store(side == 2)
		return true, nil
	}
	// spread reports whether the chunk's parents are too spread to read.
	spread := func() bool { return uint64(hi-lo) >= uint64(rangeSpan*n+4096) }
	if mixed.Load() {
		if full, err := readKids(); err != nil || !full {
			return n, false, false, err
		}
		if len(kids) == 0 {
			return n, false, true, nil
		}
	} else {
		var l, h sql.NullInt64
		moving, sided, err := sums("COUNT(*), MIN("+fk+"), MAX("+fk+"), ", moves, kidsFrom, kidArgs, &n, &l, &h)
		if err != nil {
			return 0, false, false, err
		}
		if !l.Valid || sided == 0 { // no child references a parent, or none has a side
			mixed.Store(false)
			return n, false, true, nil
		}
		lo, hi, side = l.Int64, h.Int64, sideOf(moving, sided)
		mixed.Store(side == 2)
	}
	if spread() {
		return n, false, false, nil
	}
	if side != 2 {
		moving, sided, err := sums("", parentMoves, parentsFrom, parentArgsOf(lo, hi))
		if err != nil {
			return 0, false, false, err
		}
		if sideOf(moving, sided) == side || sided == 0 {
			return n, false, true, nil
		}
	}
	// Parents on the other side than some children: match the lists.
	if !listed {
		if full, err := readKids(); err != nil || !full {
			return n, false, false, err
		}
		if len(kids) == 0 {
			return n, false, true, nil
		}
		if spread() {
			return n, false, false, nil
		}
	}
	move, stay, full, err := lists("", pk, parentMoves, parentsFrom, parentArgsOf(lo, hi))
	if err != nil {
		return 0, false, false, err
	}
	// sides[ref-lo]: 0 no parent (or none with a side), 1 the parent stays, 2 it moves.
	sides := make([]byte, hi-lo+1)
	mark := func(s byte) func(int64) bool {
		return func(ref int64) bool {
			if ref < lo || ref > hi {
				return false
			}
			sides[ref-lo] = s
			return true
		}
	}
	if !full || !eachInt(move, mark(2)) || !eachInt(stay, mark(1)) {
		return n, false, false, nil
	}
	for _, c := range kids {
		if s := sides[c.ref-lo]; s != 0 && (s == 2) != c.moves {
			return n, true, true, nil
		}
	}
	return n, false, true, nil
}

// kid is a child's key and side, as matchByRange matches them.
type kid struct {
	ref   int64
	moves bool
}

// eachInt calls fn for each integer of a comma-separated list (nil: none)
// until fn returns false; it reports false then, and on anything else than
// such a list (an empty key, a stray byte, a key out of the int64 range).
func eachInt(l []byte, fn func(int64) bool) bool {
	for len(l) > 0 {
		i := 0
		for i < len(l) && l[i] != ',' {
			i++
		}
		v, ok := parseInt(l[:i])
		if !ok || !fn(v) {
			return false
		}
		if i == len(l) {
			break
		}
		l = l[i+1:]
		if len(l) == 0 {
			return false // a trailing comma
		}
	}
	return true
}

// parseInt parses a decimal int64 (an optional minus sign, then digits)
// without the string strconv.ParseInt would take.
func parseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
	}
	switch {
	case neg && u <= 1<<63:
		return int64(-u), true // -2^63 wraps to itself
	case !neg && u < 1<<63:
		return int64(u), true
	}
	return 0, false
}

// valueWalk hands out a chunk's bounds without reading the child: when its
// primary key is one integer column, a chunk is a range of key values,
// sized from the density of the chunks read so far (the key walk's
// LIMIT 1 OFFSET reads every row to find a bound: a quarter of the server's
// CPU once chunks are matched by key range). The first chunk is open below
// and the last open above, so rows written meanwhile outside the bounds
// read at the start are read too.
type valueWalk struct {
	mu        sync.Mutex
	min, max  int64 // the key's bounds at the start
	width     int64 // the next chunk's, in key values
	rows, per int64 // the last chunk read: rows in per key values (per < 0: a bounded chunk)
	settled   int64 // the width of the last chunk read that held a quarter of keyCheckChunk rows or more
	ceiling   int64 // a key up to which the key walk found at most 2 chunks' rows (0: none)
}

// newValueWalk returns nil (the key walk serves) unless the key is one
// integer column that fits an int64 and the table has rows.
func newValueWalk(ctx context.Context, db *sql.DB, key chunk.Key) (*valueWalk, error) {
	if len(key.Cols) != 1 {
		return nil, nil
	}
	c := key.Cols[0]
	if !fitsInt64(c) {
		return nil, nil
	}
	var lo, hi sql.NullInt64
	col := dbutil.QuoteIdent(c.Name)
	if err := db.QueryRowContext(ctx, "SELECT MIN("+col+"), MAX("+col+") FROM "+dbutil.Table(key.Schema, key.Table)).Scan(&lo, &hi); err != nil {
		return nil, err
	}
	if !lo.Valid || !hi.Valid || lo.Int64 == math.MinInt64 {
		return nil, nil
	}
	return newValueWalkOf(lo.Int64, hi.Int64), nil
}

func newValueWalkOf(lo, hi int64) *valueWalk {
	return &valueWalk{min: lo, max: hi, width: keyCheckChunk, settled: keyCheckChunk}
}

// read records that a chunk of width key values held rows rows (width < 0:
// a chunk the key walk bounded after a gap, whose width says nothing of
// the keys' density beyond it).
func (w *valueWalk) read(width, rows int64) {
	if w == nil || width == 0 {
		return
	}
	w.mu.Lock()
	w.rows, w.per = rows, width
	if rows >= keyCheckChunk/4 && width > 0 {
		w.settled = width
	}
	w.mu.Unlock()
}

// chunk returns the upper bound of the chunk after after (nil: the first
// chunk), whether one follows it (false: this one is open above), and the
// width to record for it. Across a gap in the keys the width grows fast:
// walk (the key walk: the upper bound n rows after after) then bounds the
// chunk to 2 chunks' rows, so a dense run after the gap is not read, or
// joined, as one chunk; when fewer rows are left, the chunk is the last.
func (w *valueWalk) chunk(after []string, walk func(n int) ([]string, bool, error)) ([]string, bool, int64, error) {
	upper, more, width := w.next(after)
	if w.leaping(upper) {
		walked, full, err := walk(2 * keyCheckChunk)
		if err != nil {
			return nil, false, 0, err
		}
		if !full {
			return nil, false, 0, nil // under 2 chunks' rows left: the last chunk
		}
		upper, width = w.bound(after, upper, walked)
		more = true
	}
	return upper, more, width, nil
}

// next returns the upper bound of the chunk after after (nil: the first
// chunk), whether one follows it (false: this one is open above), and the
// key values it spans. The width moves toward keyCheckChunk rows by the
// last chunk read, by at most 4x a step; after a bounded chunk it starts
// over from keyCheckChunk.
func (w *valueWalk) next(after []string) (upper []string, more bool, width int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.per < 0:
		w.width, w.settled = keyCheckChunk, keyCheckChunk
	case w.per > 0:
		up := w.width * 4 // saturating: keys may span the whole int64 range
		if w.width > math.MaxInt64/4 {
			up = math.MaxInt64
		}
		want := up
		if w.rows > 0 {
			want = int64(min(float64(w.per)*keyCheckChunk/float64(w.rows), float64(up)))
		}
		w.width = max(1, min(want, up), w.width/4)
	}
	w.per = 0
	lo := w.lower(after)
	if lo >= w.max || uint64(w.max)-uint64(lo) <= uint64(w.width) {
		return nil, false, 0
	}
	return []string{strconv.FormatInt(lo+w.width, 10)}, true, w.width
}

// lower is the exclusive lower bound of the chunk after after.
func (w *valueWalk) lower(after []string) int64 {
	if after == nil {
		return w.min - 1 // the first chunk is open below
	}
	lo, _ := strconv.ParseInt(after[0], 10, 64)
	return lo
}

// leaping reports whether the chunk up to upper (nil: open above) needs the
// key walk's bound: it is more than 4 times as wide as the last chunk that
// held rows enough, and reaches past the last bound the key walk found.
func (w *valueWalk) leaping(upper []string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.width/4 <= w.settled {
		return false
	}
	if upper == nil || w.ceiling == 0 {
		return true
	}
	hi, _ := strconv.ParseInt(upper[0], 10, 64)
	return hi > w.ceiling
}

// bound returns the nearer of upper (nil: open above) and walked (where the
// key walk found 2 chunks' rows after after) and the width to record for
// the chunk: -1 when walked bounds it.
func (w *valueWalk) bound(after, upper, walked []string) ([]string, int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	b, err := strconv.ParseInt(walked[0], 10, 64)
	if err != nil {
		return upper, 0
	}
	if upper != nil {
		if a, _ := strconv.ParseInt(upper[0], 10, 64); b >= a {
			w.ceiling = b
			return upper, a - w.lower(after)
		}
	}
	w.ceiling = 0
	return walked, -1
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
