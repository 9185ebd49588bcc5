package binlog

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"time"

	gsql "github.com/go-sql-driver/mysql"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/fault"
)

// batch is the applier's pending work.
type batch struct {
	acts    []action
	covered int      // acts[:covered] end at a source transaction boundary
	pos     Position // that boundary
	when    time.Time
	since   time.Time // when acts[:covered] became committable
}

func (t *Tailer) applyLoop() {
	err := t.apply()
	t.setErr(err)
	close(t.applierDone)
}

// apply batches row actions and commits them in target transactions of at
// most BatchRows, at source transaction boundaries whenever one is in the
// batch. It commits as soon as nothing more is waiting (after a short
// linger), so an idle stream is never held back to fill a batch, and
// covered rows never wait more than a few lingers for one.
func (t *Tailer) apply() error {
	var b batch
	ddl := false // a schema change was carried: checkpoint the boundary after it at once
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		var it item
		if b.covered > 0 {
			select {
			case it = <-t.ch:
			default:
				timer.Reset(t.linger)
				select {
				case it = <-t.ch:
					timer.Stop()
				case <-timer.C:
					if err := t.commitCovered(&b); err != nil {
						return err
					}
					continue
				}
			}
		} else {
			it = <-t.ch
		}
		if err := t.add(&b, it.acts); err != nil {
			return err
		}
		switch it.kind {
		case itemBoundary:
			t.mu.Lock()
			if it.txn {
				t.transactions++
			}
			t.mu.Unlock()
			if len(b.acts) == 0 {
				if err := t.advance(it.pos, it.when, ddl); err != nil {
					return err
				}
				ddl = false
				continue
			}
			if b.covered == 0 {
				b.since = time.Now()
			}
			b.covered, b.pos, b.when = len(b.acts), it.pos, it.when
			// Other schemas' transactions streaming in never leave the
			// linger's pause: a few covered rows would wait for a full batch
			// (hundreds of ms behind a fence, where no more come).
			if time.Since(b.since) >= 4*t.linger {
				if err := t.commitCovered(&b); err != nil {
					return err
				}
			}
		case itemDDL:
			if err := t.commitCovered(&b); err != nil {
				return err
			}
			if err := t.carried(it.ddl); err != nil {
				return err
			}
			ddl = true
		case itemStop:
			if err := t.commitCovered(&b); err != nil {
				return errors.Join(it.err, err)
			}
			if err := t.finalCheckpoint(); err != nil {
				return errors.Join(it.err, err)
			}
			return it.err
		}
	}
}

// add appends row actions to the batch, committing whenever it holds
// BatchRows.
func (t *Tailer) add(b *batch, acts []action) error {
	b.acts = append(b.acts, acts...)
	for len(b.acts) >= t.cfg.BatchRows {
		if b.covered > 0 {
			if err := t.commitCovered(b); err != nil {
				return err
			}
			continue
		}
		// One source transaction larger than a batch: commit its head;
		// the position waits for its end.
		if err := t.commit(b.acts[:t.cfg.BatchRows]); err != nil {
			return err
		}
		b.acts = append([]action(nil), b.acts[t.cfg.BatchRows:]...)
	}
	return nil
}

// commitCovered commits the actions up to the batch's boundary and moves
// Applied there; actions of a transaction still being read stay pending.
func (t *Tailer) commitCovered(b *batch) error {
	if b.covered == 0 {
		return nil
	}
	for i := 0; i < b.covered; i += t.cfg.BatchRows {
		if err := t.commit(b.acts[i:min(b.covered, i+t.cfg.BatchRows)]); err != nil {
			return err
		}
	}
	rest := b.acts[b.covered:]
	b.acts = append(make([]action, 0, max(len(rest), 64)), rest...)
	b.covered = 0
	return t.advance(b.pos, b.when, true)
}

// parallelMin is the fewest rows (after compaction) a batch spreads over
// the workers: a trickle of changes stays one transaction on one session.
const parallelMin = 256

// commit applies acts: in one target transaction, or, when the batch is
// large and compacts (each row once), split into Workers parts committed in
// parallel, one transaction per part on its own session. Each part touches
// rows no other part touches, and the next batch starts only after every
// part committed, so the changes to one row stay in source order. A crash
// between the parts' commits leaves some committed before the checkpoint
// moved: the replay from the checkpoint repeats them (every statement is an
// idempotent upsert or delete by primary key), as for a transaction larger
// than a batch. REPLACE settles unique values that move between rows of
// different parts, in whichever order the parts run (see newShape).
func (t *Tailer) commit(acts []action) error {
	if t.cfg.Throttle != nil {
		if err := t.cfg.Throttle(t.ctx); err != nil {
			return err
		}
	}
	n := int64(0) // row changes read, not the rows left after compaction
	for _, a := range acts {
		if a.count {
			n++
		}
	}
	acts, parts := batchParts(acts, t.cfg.Workers, t.nontx)
	if len(parts) == 1 {
		if err := t.commitPart(0, mergeRuns(acts, t.lim), nil); err != nil {
			return err
		}
	} else if err := t.parallelApply(parts); err != nil {
		return err
	}
	t.mu.Lock()
	t.rowsApplied += n
	t.batches++
	t.parallelBatches += int64(min(1, len(parts)-1))
	t.mu.Unlock()
	return nil
}

// FaultParallel is the fault point (internal/fault) inside a parallel
// batch: the first part committed, the others not yet.
const FaultParallel = "during:apply:parallel"

// parallelApply commits each part on its own worker session at once and
// waits for all of them. A part that lost a deadlock to another (unique or
// gap locks) runs again once the others are done, alone: no waiting, and no
// second deadlock with them.
func (t *Tailer) parallelApply(parts [][]action) error {
	stmts := make([][]stmt, len(parts))
	errs := make([]error, len(parts))
	first := make(chan struct{})
	half := fault.On(FaultParallel)
	var wg sync.WaitGroup
	for w, part := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var beforeCommit func()
			if half && w > 0 {
				beforeCommit = func() { <-first; fault.Hit(FaultParallel) } // tests: kill -9 with one part committed
			}
			stmts[w] = mergeRuns(part, t.lim)
			errs[w] = t.execTx(w, stmts[w], beforeCommit)
			if w == 0 {
				close(first)
			}
		}()
	}
	wg.Wait()
	var failed error
	for w, err := range errs {
		if err == nil {
			continue
		}
		if !retryable(err) {
			failed = errors.Join(failed, err)
			continue
		}
		t.retried(w, err)
		if err := t.commitPart(w, stmts[w], nil); err != nil {
			failed = errors.Join(failed, err)
		}
	}
	return failed
}

// batchParts compacts a batch and cuts it into the parts to commit, each
// in its own transaction: one part unless the batch compacts (each row
// once), holds parallelMin rows or more, and changes no table without
// transactions (nontx: their statements run after the transaction, in the
// batch's order).
func batchParts(acts []action, workers int, nontx map[string]bool) ([]action, [][]action) {
	acts, compacted := compact(acts)
	if !compacted || workers < 2 || len(acts) < parallelMin {
		return acts, [][]action{acts}
	}
	for _, a := range acts {
		if nontx[a.shape.name] {
			return acts, [][]action{acts}
		}
	}
	parts := make([][]action, 0, workers)
	for i := 0; i < workers; i++ {
		parts = append(parts, acts[i*len(acts)/workers:(i+1)*len(acts)/workers])
	}
	return acts, parts
}

// commitPart runs stmts in one transaction on worker w's session,
// retrying lock timeouts, deadlocks and lost connections: every statement
// is idempotent. beforeCommit, if set, runs just before the commit.
func (t *Tailer) commitPart(w int, stmts []stmt, beforeCommit func()) error {
	var err error
	for attempt := 0; ; attempt++ {
		if err = t.execTx(w, stmts, beforeCommit); err == nil {
			return nil
		}
		if !retryable(err) || attempt == 4 {
			return err
		}
		t.retried(w, err)
		select {
		case <-time.After(time.Duration(100<<attempt) * time.Millisecond):
		case <-t.ctx.Done():
			return err
		}
	}
}

func retryable(err error) bool {
	return dbutil.IsRetryableLockErr(err) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, gsql.ErrInvalidConn)
}

// retried counts a lock error, or drops worker w's session after a lost
// connection, before the transaction runs again.
func (t *Tailer) retried(w int, err error) {
	if dbutil.IsRetryableLockErr(err) {
		t.lockRetries.Add(1)
	} else {
		t.dropSession(w)
	}
}

func (t *Tailer) execTx(w int, stmts []stmt, beforeCommit func()) error {
	conn, err := t.session(t.ctx, w)
	if err != nil {
		return err
	}
	tx, err := conn.BeginTx(t.ctx, nil)
	if err != nil {
		return fmt.Errorf("binlog tail of %s: begin on the target: %w", t.cfg.Schema, err)
	}
	var later []stmt
	for _, s := range stmts {
		if s.guard != nil {
			var ok bool
			if s, ok, err = t.guard(tx, s); err != nil {
				_ = tx.Rollback()
				return fmt.Errorf("binlog tail of %s: apply to %s: %w", t.cfg.Schema, s.table, err)
			}
			if !ok {
				continue
			}
		}
		if t.nontx[s.table] {
			later = append(later, s)
			continue
		}
		if s.cascade {
			if err := t.execCascade(tx, s); err != nil {
				_ = tx.Rollback()
				t.dropSession(w) // its foreign_key_checks may be left on
				return fmt.Errorf("binlog tail of %s: apply a cascading delete to %s: %w", t.cfg.Schema, s.table, err)
			}
			continue
		}
		if _, err := tx.ExecContext(t.ctx, s.sql, s.args...); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("binlog tail of %s: apply to %s: %w", t.cfg.Schema, s.table, err)
		}
	}
	if beforeCommit != nil {
		beforeCommit()
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("binlog tail of %s: commit on the target: %w", t.cfg.Schema, err)
	}
	// Non-transactional tables, one autocommitted statement each: a crash
	// before the checkpoint replays the batch, and every statement is
	// idempotent (upserts and deletes by primary key).
	for _, s := range later {
		if _, err := conn.ExecContext(t.ctx, s.sql, s.args...); err != nil {
			return fmt.Errorf("binlog tail of %s: apply to %s: %w", t.cfg.Schema, s.table, err)
		}
	}
	return nil
}

// execCascade runs a parent's delete so the target's InnoDB repeats the
// source's ON DELETE CASCADE / SET NULL: the parent's image first (checks
// off: its own parents may not be there yet), then the delete with checks on.
func (t *Tailer) execCascade(tx *sql.Tx, s stmt) error {
	for _, q := range []struct {
		sql  string
		args []any
	}{{s.pre, s.preArgs}, {"SET SESSION foreign_key_checks = 1", nil}, {s.sql, s.args}, {"SET SESSION foreign_key_checks = 0", nil}} {
		if _, err := tx.ExecContext(t.ctx, q.sql, q.args...); err != nil {
			return err
		}
	}
	return nil
}

// advance moves Applied to p (everything before it is on the target) and
// checkpoints: after every commit, and at most once a second when only
// other tables' transactions went by.
func (t *Tailer) advance(p Position, when time.Time, committed bool) error {
	t.mu.Lock()
	if p.Compare(t.applied) > 0 {
		t.applied = p
		t.appliedAt = time.Now()
		close(t.progress)
		t.progress = make(chan struct{})
	}
	if !when.IsZero() {
		t.lastEventTime = when
	}
	due := committed || time.Since(t.checkpointAt) >= time.Second
	t.mu.Unlock()
	if due {
		return t.checkpoint(p)
	}
	return nil
}

func (t *Tailer) checkpoint(p Position) error {
	t.mu.Lock()
	if p.Compare(t.checkpointed) <= 0 {
		t.mu.Unlock()
		return nil
	}
	t.mu.Unlock()
	if t.cfg.Checkpoint != nil {
		if err := t.cfg.Checkpoint(t.ctx, p); err != nil {
			return fmt.Errorf("binlog tail of %s: checkpoint at %s: %w", t.cfg.Schema, p, err)
		}
	}
	t.mu.Lock()
	t.checkpointed = p
	t.checkpointAt = time.Now()
	t.mu.Unlock()
	t.log.Debug("binlog tail checkpoint", "schema", t.cfg.Schema, "applied", p.String(), "gtid", p.GTID)
	return nil
}

func (t *Tailer) finalCheckpoint() error {
	return t.checkpoint(t.Applied())
}
