package binlog

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// WaitFor blocks until Applied() >= p, the tail stops, or ctx ends.
func (t *Tailer) WaitFor(ctx context.Context, p Position) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		t.mu.Lock()
		applied, progress := t.applied, t.progress
		t.mu.Unlock()
		if applied.Compare(p) >= 0 {
			return nil
		}
		select {
		case <-t.done:
			if t.Applied().Compare(p) >= 0 {
				return nil
			}
			if err := t.Err(); err != nil {
				return err
			}
			return fmt.Errorf("binlog tail of %s stopped at %s before reaching %s", t.cfg.Schema, t.Applied(), p)
		case <-ctx.Done():
			return fmt.Errorf("binlog tail of %s: waiting for %s (applied %s): %w", t.cfg.Schema, p, t.Applied(), ctx.Err())
		case <-progress:
		case <-tick.C:
			if t.idle() {
				if ok, err := onlyHousekeeping(ctx, t.src, applied, p); err == nil && ok {
					// Nothing but housekeeping lies between: p is reached,
					// with the GTIDs of applied (housekeeping carries none;
					// p's own set, read from MySQL's status, may lack some:
					// gtidhole.go).
					reached := p
					reached.GTID = applied.GTID
					t.log.Debug("binlog tail reached a position past housekeeping events only", "schema", t.cfg.Schema, "from", applied.String(), "to", p.String())
					if err := t.advance(reached, time.Time{}, false); err != nil {
						return err
					}
					return nil
				}
			}
			t.nudge(ctx)
		}
	}
}

// idle reports that nothing received is waiting to be applied.
func (t *Tailer) idle() bool {
	return len(t.ch) == 0 && time.Since(time.Unix(0, t.lastEvent.Load())) > 50*time.Millisecond
}

// housekeeping are binlog events that carry no data: a tail that applied
// everything before them has applied everything before the position after them.
var housekeeping = map[string]bool{
	"Format_desc": true, "Gtid_list": true, "Binlog_checkpoint": true, "Rotate": true,
	"Start_encryption": true, "Stop": true, "Heartbeat": true, "Previous_gtids": true,
}

// onlyHousekeeping reads the source's binlog from `from` up to `to` and
// reports whether every event in between is housekeeping. An idle server's
// position sits after such events (a new file's header, a checkpoint), which
// canal never reports as a position; this tells the tail it has caught up
// without waiting for the next transaction. The events read must reach `to`:
// MySQL's status reports a position its SHOW BINLOG EVENTS (and the binlog
// dump) do not show yet while a group is being written, and a zero `from`
// (a tail on a promoted replica before its first event) says nothing.
func onlyHousekeeping(ctx context.Context, src *sql.DB, from, to Position) (bool, error) {
	if from.Compare(to) >= 0 {
		return true, nil
	}
	if from.IsZero() {
		return false, nil
	}
	files, err := BinaryLogs(ctx, src)
	if err != nil {
		return false, err
	}
	budget := 200     // a longer stretch means real traffic: let the tail catch up
	var seen Position // the end of the last event read
	file, pos := from.File, from.Pos
	for {
		rows, err := src.QueryContext(ctx, "SHOW BINLOG EVENTS IN ? FROM ? LIMIT ?", file, pos, budget)
		if err != nil {
			return false, err
		}
		for rows.Next() {
			var name, typ string
			var at, end uint64
			var serverID, info any
			if err := rows.Scan(&name, &at, &typ, &serverID, &end, &info); err != nil {
				rows.Close()
				return false, err
			}
			if (Position{File: name, Pos: uint32(at)}).Compare(to) >= 0 {
				rows.Close()
				return true, nil
			}
			if !housekeeping[typ] {
				rows.Close()
				return false, nil
			}
			seen = Position{File: name, Pos: uint32(end)}
			budget--
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return false, err
		}
		if file == to.File {
			return seen.Compare(to) >= 0, nil
		}
		if budget <= 0 {
			return false, nil
		}
		next := ""
		for i, f := range files {
			if f == file && i+1 < len(files) {
				next = files[i+1]
			}
		}
		if next == "" {
			return false, nil
		}
		file, pos = next, 4
	}
}

// nudge rotates the source binlog when the tail is idle but short of the
// position waited for: the events at the end of the log carry no position
// canal reports (a new file's header, statements it cannot parse such as
// CREATE TRIGGER), and the rotate event does.
func (t *Tailer) nudge(ctx context.Context) {
	if t.cfg.NoFlushBinlog {
		return
	}
	const idle = 500 * time.Millisecond
	t.mu.Lock()
	due := time.Since(t.appliedAt) > idle && time.Since(t.lastBinlogFlush) > 2*time.Second
	if due {
		t.lastBinlogFlush = time.Now()
	}
	t.mu.Unlock()
	if !due || time.Since(time.Unix(0, t.lastEvent.Load())) < idle || len(t.ch) > 0 {
		return
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := t.src.ExecContext(fctx, "FLUSH BINARY LOGS"); err != nil {
		t.mu.Lock()
		warned := t.flushWarned
		t.flushWarned = true
		t.mu.Unlock()
		if !warned {
			t.log.Warn("binlog tail: cannot rotate the source binlog to move past its last events; waiting for the next transaction instead",
				"schema", t.cfg.Schema, "error", err)
		}
	}
}

// SourceCommitted waits, at most two seconds, until the source has committed
// every transaction the tail applied. A binlog dump sends a group as soon as
// it is written, before the engine commits it, so for a moment the target
// holds rows the source does not show yet: a comparison then differs while
// the source stands still, every re-check alike. MySQL counts a transaction
// in gtid_executed after its engine commit; MariaDB keeps no such set, and
// there this returns at once. Past the bound it returns nil: a caller
// compares again later.
func (t *Tailer) SourceCommitted(ctx context.Context) error {
	set := t.Applied().GTID
	if !t.flavor.MySQL || set == "" {
		return nil
	}
	var timedOut sql.NullInt64
	if err := t.src.QueryRowContext(ctx, "SELECT WAIT_FOR_EXECUTED_GTID_SET(?, 2)", set).Scan(&timedOut); err != nil {
		return fmt.Errorf("binlog tail of %s: wait for the source to commit %s: %w", t.cfg.Schema, set, err)
	}
	if timedOut.Int64 != 0 {
		t.log.Debug("binlog tail: the source has not committed everything applied yet", "schema", t.cfg.Schema, "gtid", set)
	}
	return nil
}
