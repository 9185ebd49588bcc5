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
	"errors"
	"fmt"
	"sync"
	"time"

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
	// windowPerSession chunks per delete session are found ahead of the
	// watermark at most: enough that one whose neighbours are not being
	// deleted is always at hand.
	windowPerSession = 3
	// lockRetries is how often a chunk whose delete met a deadlock or a
	// lock wait timeout runs again (after 10, 20, 40, 80, 160 ms).
	lockRetries = 5
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
// bounds; InFlight sessions delete chunks at once, never two neighbours:
// a delete of (lo, hi] also locks the row after hi, the first row of the
// next chunk that still has rows, so neighbours deleted at once wait for
// each other (under READ COMMITTED too), while chunks with rows between
// them never meet. The watermark
// advances over the chunks done in key order only, so a resume after a
// crash deletes again at most the chunks found ahead of it (the window,
// about three times InFlight; a delete by key range is idempotent). The
// walk stays ahead of the deletes: it never steps over rows a delete has
// only marked deleted.
//
// Rows in scope inserted behind the watermark while it runs are not
// deleted: callers fence the source first or prune again.
// Long on purpose: the walk, the deleters and the dispatch share one window
// of chunks (pending, in flight, finished) whose rules read best together.
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
	// the walk, and the chunks already found are deleted and recorded (each
	// is one short statement), as a run between chunks stops.
	inner, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }() // before the walker's session is released
	type piece struct {
		seq     int
		lo, hi  []string // (lo, hi]; hi nil: open (the last chunk)
		deleted int64
		err     error
	}
	window := windowPerSession * workers // chunks found and not yet recorded, at most
	found := make(chan piece, window)
	todo := make(chan piece)
	done := make(chan piece, workers)
	var walkErr error // set before found is closed
	// The walk: chunk bounds in key order, paced by the throttle.
	wg.Add(1 + workers)
	go func() {
		defer wg.Done()
		defer close(found)
		after := w.After
		for seq := 0; ; seq++ {
			if err := ctx.Err(); err != nil {
				walkErr = wrap("interrupted", err)
				return
			}
			if p.Throttle != nil {
				if err := p.Throttle(ctx); err != nil {
					walkErr = wrap("throttle", err)
					return
				}
			}
			upper, more, err := chunk.Upper(ctx, walker, key, after, where, whereArgs, n)
			if err != nil {
				walkErr = wrap(fmt.Sprintf("find the chunk after key %q", after), err)
				return
			}
			pc := piece{seq: seq, lo: after}
			if more {
				pc.hi = upper
			}
			select {
			case found <- pc:
			case <-ctx.Done():
				walkErr = wrap("interrupted", ctx.Err())
				return
			case <-inner.Done():
				return
			}
			if !more {
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
					// A deadlock or lock wait with the application's own
					// writes (a split's source keeps serving) rolls the
					// one-statement delete back whole: it runs again.
					for try := 0; rerr == nil; try++ {
						var res sql.Result
						if res, rerr = conn.ExecContext(inner, del+rng+" AND "+where, append(args, whereArgs...)...); rerr == nil {
							pc.deleted, rerr = res.RowsAffected()
							break
						}
						if !dbutil.IsRetryableLockErr(rerr) || try == lockRetries {
							break
						}
						select {
						case <-time.After(time.Duration(10<<try) * time.Millisecond):
							rerr = nil
						case <-inner.Done():
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
	defer close(todo) // the workers end once the deferred cancel has run too
	// The dispatch: chunks found wait in key order (pending) until no
	// neighbour is in flight; chunks done wait (finished) until every chunk
	// before them is, then the watermark passes them and is saved.
	var pending []piece
	inFlight := map[int]bool{}
	finished := map[int]piece{}
	next := 0       // the first chunk not yet recorded
	walking := true // found is open
	last := -1      // the last chunk found
	// neighbourInFlight reports whether the nearest chunk below (dir -1)
	// or above (dir 1) seq that still holds rows is being deleted: a chunk
	// done (its rows gone or only marked deleted) no longer separates two
	// chunks, the row after one is then the other's first.
	neighbourInFlight := func(seq, dir int) bool {
		for s := seq + dir; s >= next && s <= last; s += dir {
			if _, gone := finished[s]; !gone {
				return inFlight[s]
			}
		}
		return false
	}
	for {
		if !walking && len(pending) == 0 && len(inFlight) == 0 {
			// Every chunk found is recorded (a Done mark returned
			// below); the walk stopped early.
			if walkErr == nil {
				walkErr = wrap("walk", errors.New("the key walk ended before the last chunk"))
			}
			return w, walkErr
		}
		pick := -1
		if len(inFlight) < workers {
			for i, pc := range pending {
				if !neighbourInFlight(pc.seq, -1) && !neighbourInFlight(pc.seq, 1) {
					pick = i
					break
				}
			}
		}
		var send chan piece
		var out piece
		if pick >= 0 {
			send, out = todo, pending[pick]
		}
		var recv chan piece
		if walking && len(pending)+len(inFlight)+len(finished) < window {
			recv = found
		}
		select {
		case pc, ok := <-recv:
			if !ok {
				walking = false
				continue
			}
			pending = append(pending, pc)
			last = pc.seq
			continue
		case send <- out:
			pending = append(pending[:pick], pending[pick+1:]...)
			inFlight[out.seq] = true
			continue
		case pc := <-done:
			delete(inFlight, pc.seq)
			if pc.err != nil {
				return w, pc.err
			}
			finished[pc.seq] = pc
		}
		for {
			pc, ok := finished[next]
			if !ok {
				break
			}
			delete(finished, next)
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
