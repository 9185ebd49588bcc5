package verify

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
)

// frozenFixture is TestWritesDuringTheWalkShareSettles's table: rows 1..written
// take a stream of writes on the source, row drift differs on the target in
// fact. Its catchUp copies the source's rows 1..written to the target, as a
// binlog tail that has applied everything the source committed would.
type frozenFixture struct {
	p        pair
	writes   atomic.Int64
	stop     func()
	catchUps int
}

const frozenRows, frozenWritten, frozenDrift = 20000, 18000, 19500

func newFrozenFixture(t *testing.T) *frozenFixture {
	f := &frozenFixture{p: newPair(t,
		"CREATE TABLE w (id INT PRIMARY KEY, v INT NOT NULL)",
		"INSERT INTO w SELECT seq, seq FROM seq_1_to_"+strconv.Itoa(frozenRows),
	)}
	run(t, f.p.dst, "UPDATE "+dbutil.Table(f.p.tname, "w")+" SET v = -1 WHERE id = ?", frozenDrift)
	wctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		src := dbutil.Table(f.p.sname, "w")
		for n := 1; wctx.Err() == nil; n++ {
			if _, err := f.p.src.ExecContext(context.Background(), "UPDATE "+src+" SET v = ? WHERE id = ?", -n, 1+n*7919%frozenWritten); err != nil {
				return
			}
			f.writes.Add(1)
			time.Sleep(time.Millisecond)
		}
	})
	f.stop = func() { stop(); wg.Wait() }
	t.Cleanup(f.stop)
	for deadline := time.Now().Add(10 * time.Second); f.writes.Load() < 300 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	return f
}

func (f *frozenFixture) catchUp(ctx context.Context) error {
	f.catchUps++
	rows, err := f.p.src.QueryContext(ctx, "SELECT id, v FROM "+dbutil.Table(f.p.sname, "w")+" WHERE id <= ?", frozenWritten)
	if err != nil {
		return err
	}
	defer rows.Close()
	var args []any
	flush := func() error {
		if len(args) == 0 {
			return nil
		}
		q := "REPLACE INTO " + dbutil.Table(f.p.tname, "w") + " (id, v) VALUES " + strings.Repeat("(?, ?),", len(args)/2)
		_, err := f.p.dst.ExecContext(ctx, strings.TrimSuffix(q, ","), args...)
		args = args[:0]
		return err
	}
	for rows.Next() {
		var id, v int64
		if err := rows.Scan(&id, &v); err != nil {
			return err
		}
		if args = append(args, id, v); len(args) == 2000 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return flush()
}

// wantDriftOnly fails unless res holds exactly the drift row's chunk, firm and named.
func wantDriftOnly(t *testing.T, res Result) {
	t.Helper()
	if res.Rows != frozenRows {
		t.Fatalf("%d rows compared, want %d", res.Rows, frozenRows)
	}
	if len(res.Mismatches) != 1 {
		t.Fatalf("want one mismatch (row %d), got %d: %+v", frozenDrift, len(res.Mismatches), res.Mismatches)
	}
	c := res.Mismatches[0]
	if c.Changing || !inChunk(c, frozenDrift) || len(c.Rows) != 1 || c.Rows[0].Key[0] != strconv.Itoa(frozenDrift) {
		t.Fatalf("mismatch %s does not name row %d alone: changing %v, rows %+v", c.Bounds(), frozenDrift, c.Changing, c.Rows)
	}
}

// TestFrozenTableDiffersOnlyInFact: under the same stream of writes that
// makes nearly every chunk differ on its first check in
// TestWritesDuringTheWalkShareSettles, the table is frozen at its first
// differing chunk, and from there compared in one snapshot per side: only
// the chunks checked before the freeze and the one that differs in fact
// differ at their first check, no settle runs, and the one mismatch left is
// the real one, named. The read lock is brief: the writer goes on writing
// while the walk runs.
func TestFrozenTableDiffersOnlyInFact(t *testing.T) {
	f := newFrozenFixture(t)
	ctx := context.Background()
	v := f.p.verifier(100)
	settles, firstDiffer := 0, 0
	v.Settle = func(context.Context) error { settles++; return nil }
	// The fixture's catch-up copies every written row (a real tail applies
	// only what it lags by): on a loaded machine that can take seconds.
	v.Freeze, v.Narrow, v.FreezeFor = f.catchUp, true, 20*time.Second
	v.checked = func(attempt int, differs bool) {
		if attempt == 0 && differs {
			firstDiffer++
		}
	}
	var frozenErr error
	var atFreeze int64
	v.OnFreeze = func(_ string, _ time.Duration, err error) { frozenErr, atFreeze = err, f.writes.Load() }
	res, err := v.Table(ctx, f.p.table(t, "w"))
	if err != nil {
		t.Fatal(err)
	}
	after := f.writes.Load()
	if frozenErr != nil {
		t.Fatalf("the table was not frozen: %v", frozenErr)
	}
	wantDriftOnly(t, res)
	t.Logf("%d chunks, %d differed on their first check, %d catch-ups, %d settles; %d writes during the walk", res.Chunks, firstDiffer, f.catchUps, settles, after-atFreeze)
	// Before the freeze: the first differing chunk and those in flight beside it.
	if firstDiffer > 2+v.threads() || settles != 0 || f.catchUps != 1 {
		t.Fatalf("%d chunks differed on their first check, %d settles, %d catch-ups: want at most %d, 0, 1", firstDiffer, settles, f.catchUps, 2+v.threads())
	}
	if after-atFreeze < 10 {
		t.Fatalf("the writer wrote %d rows during the walk: the source table stayed locked", after-atFreeze)
	}
}

// TestFreezeGivesWayToALongTransaction: a transaction holding a write on the
// table keeps the read lock off; the freeze gives up at its bound, changes
// nothing, and the table is compared chunk by chunk with settles, with the
// same answer.
func TestFreezeGivesWayToALongTransaction(t *testing.T) {
	f := newFrozenFixture(t)
	ctx := context.Background()
	tx, err := f.p.src.BeginTx(ctx, &sql.TxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "UPDATE "+dbutil.Table(f.p.sname, "w")+" SET v = v WHERE id = ?", frozenRows); err != nil {
		t.Fatal(err)
	}
	v := f.p.verifier(100)
	settles := 0
	v.Settle = func(ctx context.Context) error { settles++; return f.catchUp(ctx) }
	v.Freeze, v.Narrow, v.FreezeFor = f.catchUp, true, 300*time.Millisecond
	var frozenErr error
	v.OnFreeze = func(_ string, _ time.Duration, err error) { frozenErr = err }
	res, err := v.Table(ctx, f.p.table(t, "w"))
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(frozenErr, errNotFrozen) {
		t.Fatalf("freeze beside a long transaction: %v, want errNotFrozen", frozenErr)
	}
	if f.catchUps != settles || settles == 0 {
		t.Fatalf("%d catch-ups, %d settles: the freeze should not have caught up, the walk should have settled", f.catchUps, settles)
	}
	// Chunks the writer keeps changing may end Changing; the drift row is firm.
	firm := 0
	for _, c := range res.Mismatches {
		if !c.Changing {
			firm++
			if !inChunk(c, frozenDrift) {
				t.Errorf("firm mismatch %s: only row %d differs in fact", c.Bounds(), frozenDrift)
			}
		}
	}
	if firm != 1 {
		t.Fatalf("want one firm mismatch (row %d), got %d: %+v", frozenDrift, firm, res.Mismatches)
	}
}

// TestFreezeLeavesANonTransactionalTableChunkByChunk: a MyISAM table keeps
// no snapshot (each read sees the rows as they are then), so it is never
// frozen: it is compared chunk by chunk, and a row that differs is found.
func TestFreezeLeavesANonTransactionalTableChunkByChunk(t *testing.T) {
	p := newPair(t,
		"CREATE TABLE m (id INT PRIMARY KEY, v INT NOT NULL) ENGINE=MyISAM",
		"INSERT INTO m SELECT seq, seq FROM seq_1_to_500",
	)
	run(t, p.dst, "UPDATE "+dbutil.Table(p.tname, "m")+" SET v = -1 WHERE id = 250")
	v := p.verifier(100)
	freezes := 0
	v.Freeze = func(context.Context) error { freezes++; return nil }
	v.Settle = func(context.Context) error { return nil }
	var frozenErr error
	v.OnFreeze = func(_ string, _ time.Duration, err error) { frozenErr = err }
	res, err := v.Table(context.Background(), p.table(t, "m"))
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(frozenErr, errNotFrozen) || !strings.Contains(frozenErr.Error(), "MyISAM") || freezes != 0 {
		t.Fatalf("a MyISAM table: freeze said %v after %d catch-ups, want errNotFrozen naming the engine, none", frozenErr, freezes)
	}
	if len(res.Mismatches) != 1 || !inChunk(res.Mismatches[0], 250) {
		t.Fatalf("want the chunk of row 250 to differ, got %+v", res.Mismatches)
	}
}

// TestFreezeOnlyWhereAChunkDiffers: a table whose chunks all match (nobody
// writes it) is never frozen: no lock, no catch-up.
func TestFreezeOnlyWhereAChunkDiffers(t *testing.T) {
	p := newPair(t,
		"CREATE TABLE q (id INT PRIMARY KEY, v INT NOT NULL)",
		"INSERT INTO q SELECT seq, seq FROM seq_1_to_1000",
	)
	v := p.verifier(100)
	freezes := 0
	v.Freeze = func(context.Context) error { freezes++; return nil }
	v.Settle = func(context.Context) error { return nil }
	v.OnFreeze = func(table string, _ time.Duration, err error) {
		t.Errorf("table %s was frozen (%v): nothing differed", table, err)
	}
	res, err := v.Table(context.Background(), p.table(t, "q"))
	if err != nil || len(res.Mismatches) != 0 || freezes != 0 {
		t.Fatalf("an unwritten table: %+v, %v, %d catch-ups", res, err, freezes)
	}
}
