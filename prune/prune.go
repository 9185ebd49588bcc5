// Package prune deletes rows in small chunks: the rows a shard holds but no
// longer owns (MySQL Fabric's prune_shard), or every row of a moved shard's
// tables before the schema is dropped.
//
// Each chunk is bounded by primary-key values found with a keyset walk that
// starts at the previous chunk's bound, so a filter no index serves (MD5 of a
// column) still reads each row about once in all, never once per chunk. Each
// DELETE is its own autocommitted statement on a session that passes
// shardctl's write fence; a few run at once, and the watermark is saved
// after each chunk done in key order.
package prune

import (
	"context"
	"database/sql"
	"fmt"
	"sync"

	"github.com/shardctl/shardctl/chunk"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/schemaobj"
	"github.com/shardctl/shardctl/tables"
	"github.com/shardctl/shardctl/watermark"
)

// Pruner deletes rows from tables of DB.Schema.
type Pruner struct {
	DB        *sql.DB
	Schema    string
	ChunkRows int                               // rows per DELETE, default 1000
	Throttle  func(ctx context.Context) error   // optional, called before each chunk
	Progress  func(table string, deleted int64) // optional, rows deleted by each chunk
	InFlight  int                               // chunks deleted at once, each on its own session (default 2)
}

const (
	defaultChunkRows = 1000
	defaultInFlight  = 2
)

// Count returns how many rows of t match t.Filter (what Table would delete
// now); it changes nothing.
func (p *Pruner) Count(ctx context.Context, t tables.Table) (int64, error) {
	where, args := t.Filter.SQL(dbutil.QuoteIdent)
	var n int64
	err := p.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+dbutil.Table(p.Schema, t.Name)+" WHERE "+where, args...).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("prune %s.%s: count: %w", p.Schema, t.Name, err)
	}
	return n, nil
}

// Table deletes the rows of t that match t.Filter (callers pass a Negate
// filter for the rows a shard does not own, an empty one for every row),
// in key order from from.After, one chunk per statement, and calls save
// (if not nil) after each. It returns the last watermark reached; Done once
// nothing after it matched.
//
// One session walks the key ahead of the deletes and hands out chunk
// bounds; InFlight sessions delete chunks at once (disjoint key ranges:
// they never wait for each other's locks), and the watermark advances over
// the chunks done in key order only, so a resume after a crash deletes
// again at most the chunks in flight or done out of order (about twice
// InFlight; a delete by key range is idempotent). The walk stays ahead of
// the deletes: it never steps over rows a delete has only marked deleted.
//
// Rows in scope inserted behind the watermark while it runs are not
// deleted: callers fence the source first or prune again.
func (p *Pruner) Table(ctx context.Context, t tables.Table, from watermark.Mark, save func(watermark.Mark) error) (watermark.Mark, error) {
	w := from
	if w.Done {
		return w, nil
	}
	wrap := func(step string, err error) error {
		return fmt.Errorf("prune %s.%s: %s: %w", p.Schema, t.Name, step, err)
	}
	n := p.ChunkRows
	if n <= 0 {
		n = defaultChunkRows
	}
	workers := p.InFlight
	if workers <= 0 {
		workers = defaultInFlight
	}
	walker, err := p.session(ctx)
	if err != nil {
		return w, wrap("open session", err)
	}
	defer chunk.Release(walker)
	key, err := chunk.LoadKey(ctx, walker, p.Schema, t.Name, t.Index(), t.PK)
	if err != nil {
		return w, wrap("primary key", err)
	}
	where, whereArgs := t.Filter.SQL(dbutil.QuoteIdent)
	del := "DELETE FROM " + dbutil.Table(p.Schema, t.Name) + " WHERE "

	// inner stops the goroutines when Table returns; a cancelled ctx stops
	// the walk, and the chunks already handed out finish and are recorded
	// (each is one short statement), as a run between chunks stops.
	inner, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }() // before the walker's session is released
	type piece struct {
		seq     int
		lo, hi  []string // (lo, hi]; hi nil: open (the last chunk)
		deleted int64
		err     error
	}
	type walkEnd struct {
		handed int // chunks handed out
		err    error
	}
	todo := make(chan piece, workers)
	done := make(chan piece, workers)
	walked := make(chan walkEnd, 1)
	// The walk: chunk bounds in key order, paced by the throttle.
	wg.Add(1 + workers)
	go func() {
		defer wg.Done()
		defer close(todo)
		after := w.After
		for seq := 0; ; seq++ {
			end := func(err error) { walked <- walkEnd{handed: seq, err: err} }
			if err := ctx.Err(); err != nil {
				end(wrap("interrupted", err))
				return
			}
			if p.Throttle != nil {
				if err := p.Throttle(ctx); err != nil {
					end(wrap("throttle", err))
					return
				}
			}
			upper, more, err := chunk.Upper(ctx, walker, key, after, where, whereArgs, n)
			if err != nil {
				end(wrap(fmt.Sprintf("find the chunk after key %q", after), err))
				return
			}
			pc := piece{seq: seq, lo: after}
			if more {
				pc.hi = upper
			}
			select {
			case todo <- pc:
			case <-ctx.Done():
				end(wrap("interrupted", ctx.Err()))
				return
			case <-inner.Done():
				return
			}
			if !more {
				walked <- walkEnd{handed: seq + 1}
				return
			}
			after = upper
		}
	}()
	for range workers {
		go func() {
			defer wg.Done()
			conn, err := p.session(inner)
			if err != nil {
				err = wrap("open session", err)
			}
			for pc := range todo {
				if err != nil {
					pc.err = err // every chunk handed out is answered
				} else {
					rng, args, rerr := key.Range(pc.lo, pc.hi)
					if rerr == nil {
						var res sql.Result
						if res, rerr = conn.ExecContext(inner, del+rng+" AND "+where, append(args, whereArgs...)...); rerr == nil {
							pc.deleted, rerr = res.RowsAffected()
						}
					}
					if rerr != nil {
						pc.err = wrap(fmt.Sprintf("delete the chunk (%q, %q]", pc.lo, pc.hi), rerr)
					}
				}
				select {
				case done <- pc:
				case <-inner.Done():
				}
			}
			if conn != nil {
				chunk.Release(conn)
			}
		}()
	}
	// The chunks done, in key order: the watermark and the saves.
	waiting := map[int]piece{}
	next := 0
	var stop *walkEnd
	for {
		if stop != nil && next == stop.handed {
			return w, stop.err // every chunk handed out is recorded
		}
		select {
		case pc := <-done:
			if pc.err != nil {
				return w, pc.err
			}
			waiting[pc.seq] = pc
		case e := <-walked:
			if e.err != nil {
				stop = &e
			}
			continue
		}
		for {
			pc, ok := waiting[next]
			if !ok {
				break
			}
			delete(waiting, next)
			next++
			nw := w
			nw.Rows += pc.deleted
			if pc.hi != nil {
				nw.After = pc.hi
			} else {
				nw.Done = true
			}
			if p.Progress != nil {
				p.Progress(t.Name, pc.deleted)
			}
			if save != nil {
				if err := save(nw); err != nil {
					return w, wrap("save watermark", err)
				}
			}
			w = nw
			if w.Done {
				return w, nil
			}
		}
	}
}

// session opens a session for the pruner. The fence's triggers reject
// other sessions' writes; ours pass. Foreign keys are not checked: InnoDB
// then takes no CASCADE or SET NULL action, so exactly the named rows go
// and nothing reaches rows the operation does not own (preflight refuses
// keys that cross shards; callers delete children first with Order).
// Guarded triggers do not fire. The binlog carries only each deleted row's
// key (binlog_row_image = MINIMAL, where the account may set it): the rows
// are copies of rows that live elsewhere now, a replica deletes by key,
// and a full image of every pruned row was a quarter of the server's work.
func (p *Pruner) session(ctx context.Context) (*sql.Conn, error) {
	conn, err := chunk.Session(ctx, p.DB, fence.BypassSQL, chunk.UTC, "SET SESSION foreign_key_checks = 0", schemaobj.SkipSQL)
	if err != nil {
		return nil, err
	}
	_, _ = conn.ExecContext(ctx, "SET SESSION binlog_row_image = 'MINIMAL'")
	return conn, nil
}

// Order returns ts in an order the foreign keys of schema allow deleting in:
// children before parents.
func Order(ctx context.Context, db *sql.DB, schema string, ts []tables.Table) ([]tables.Table, error) {
	fks, err := tables.ForeignKeys(ctx, db, schema)
	if err != nil {
		return nil, err
	}
	return tables.DeleteOrder(ts, fks, schema), nil
}
