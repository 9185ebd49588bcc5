package verify

// The walk over one table's chunks. Chunks are compared Verifier.Threads at
// a time, each worker on its own pair of sessions, while the walk finds the
// next chunk's bound on a session of its own. A chunk that differs on a
// check is not settled for on the spot: it waits on a pending list while the
// walk goes on, and one Settle serves every chunk on the list (when it holds
// pendingBound chunks, or the table's chunks have all been checked once).
// The checkpoint passes only a contiguous prefix of chunks that are
// finished: matched, or differing after their last check.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/shardctl/shardctl/chunk"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/watermark"
)

const (
	// pendingBound caps the chunks waiting for a Settle, so memory and the
	// wait before a re-check stay bounded.
	pendingBound = 64
)

// threads is how many chunks are compared at once: by default the plans'
// default, so a plan, the verify command and a Verifier agree.
func (v *Verifier) threads() int {
	if v.Threads > 0 {
		return v.Threads
	}
	return plans.DefaultOptions().VerifyThreads
}

// task is one check of one chunk: its first (attempt 0) or a re-check after
// a Settle.
type task struct {
	seq     int
	c       Chunk
	attempt int
	last    bool // no re-check follows: a chunk that still differs is final (and named, with Narrow, unless it kept changing)
	frozen  bool // checked in the table's snapshots (freeze.go): a difference is final and never Changing
	err     error
}

// differs reports whether the sides differed when c was last checked.
func (c Chunk) differs() bool {
	return c.SourceRows != c.TargetRows || c.SourceSum != c.TargetSum
}

// pool checks chunks of one table on n pairs of sessions at once: the first
// is the scope's own, the others are opened for it.
type pool struct {
	tasks, out chan task
	inflight   int // tasks sent and not yet received
	wg         sync.WaitGroup
	owned      []*scope
	cancel     context.CancelFunc
}

// startPool starts n workers on sc's key and checksum; depth must be at
// least the number of tasks ever in flight at once, so neither side of the
// pool blocks the other.
func (v *Verifier) startPool(ctx context.Context, sc *scope, n, depth int) (*pool, error) {
	ctx, cancel := context.WithCancel(ctx)
	p := &pool{tasks: make(chan task, depth), out: make(chan task, depth), cancel: cancel}
	for i := range n {
		w := sc
		if i > 0 {
			var err error
			if w, err = sc.clone(ctx, v); err != nil {
				p.stop()
				return nil, err
			}
			p.owned = append(p.owned, w)
		}
		p.wg.Go(func() {
			for t := range p.tasks {
				if t.err = ctx.Err(); t.err == nil {
					t.err = v.run(ctx, w, &t)
				}
				p.out <- t
			}
		})
	}
	return p, nil
}

func (p *pool) send(t task) {
	p.inflight++
	p.tasks <- t
}

func (p *pool) receive() task {
	p.inflight--
	return <-p.out
}

// stop ends the workers (a check under way is cancelled) and closes the
// sessions the pool opened.
func (p *pool) stop() {
	p.cancel()
	close(p.tasks)
	p.wg.Wait()
	for _, sc := range p.owned {
		sc.close()
	}
}

// clone is sc on a new pair of sessions.
func (sc *scope) clone(ctx context.Context, v *Verifier) (*scope, error) {
	w := *sc
	w.src, w.dst = nil, nil
	var err error
	if w.src, err = chunk.Session(ctx, v.Source, chunk.UTC); err != nil {
		return nil, fmt.Errorf("open source session: %w", err)
	}
	if w.dst, err = chunk.Session(ctx, v.Target, chunk.UTC); err != nil {
		chunk.Release(w.src)
		return nil, fmt.Errorf("open target session: %w", err)
	}
	return &w, nil
}

// run checks t's chunk once on sc. A re-check whose source checksum differs
// from the check before marks the chunk Changing.
func (v *Verifier) run(ctx context.Context, sc *scope, t *task) error {
	c := &t.c
	rng, rngArgs, err := sc.key.Range(c.Lo, c.Hi)
	if err != nil {
		return fmt.Errorf("chunk bounds: %w", err)
	}
	before := c.SourceSum
	if err := v.check(ctx, sc, rng+" AND "+sc.where, append(rngArgs, sc.whereArgs...), c); err != nil {
		return fmt.Errorf("checksum chunk (%q, %q]: %w", c.Lo, c.Hi, err)
	}
	if t.attempt > 0 && !t.frozen && c.SourceSum != before {
		c.Changing = true
	}
	if t.last && v.Narrow && c.differs() && !c.Changing {
		if err := v.list(ctx, sc, c); err != nil {
			return fmt.Errorf("name the rows of chunk (%q, %q]: %w", c.Lo, c.Hi, err)
		}
	}
	return nil
}

// walker is the state of one table's comparison.
type walker struct {
	v        *Verifier
	table    string
	bsc      *scope // sc on the walk's own source session: bounds
	st       *stride
	p        *pool
	threads  int
	retries  int
	scopes   []*scope      // the pool's sessions, to freeze once a chunk differs; nil: never
	frozen   bool          // the rest of the table is compared in one snapshot per side
	bound    int           // pending chunks that call for a Settle (pendingBound)
	lo       []string      // where the next chunk starts
	walking  bool          // chunks remain after lo
	ahead    *Chunk        // the next chunk, its bound found, not sent yet
	next     int           // the next chunk's number
	first    map[int]Chunk // first checks the stride has not observed yet
	observed int           // chunks whose first check the stride has observed, in order
	pending  []task
	final    map[int]Chunk
	prefix   int // chunks counted in res, in order
	res      Result
	done     func(hi []string, res Result) error
}

// run walks the table to its end, or to the first error.
func (w *walker) run(ctx context.Context) error {
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("interrupted: %w", err)
		}
		if err := w.feed(ctx); err != nil {
			return err
		}
		if w.p.inflight == 0 {
			if len(w.pending) == 0 {
				if w.walking || w.ahead != nil || len(w.final) > 0 {
					return fmt.Errorf("internal: the walk stalled at chunk %d", w.next)
				}
				return nil
			}
			// Every chunk has had its first check: settle for what differs.
			if err := w.settle(ctx); err != nil {
				return err
			}
			continue
		}
		t := w.p.receive()
		if t.err != nil {
			return t.err
		}
		w.record(t)
		if w.scopes != nil && len(w.pending) > 0 {
			if err := w.freeze(ctx); err != nil {
				return err
			}
		}
		if len(w.pending) >= w.bound {
			if err := w.settle(ctx); err != nil {
				return err
			}
		}
		if err := w.commit(); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
}

// feed finds the next chunk's bound while the workers check (one chunk
// ahead) and sends chunks while a worker is free.
func (w *walker) feed(ctx context.Context) error {
	for {
		room := len(w.pending) < w.bound
		if w.ahead == nil && w.walking && room && w.learned() {
			hi, more, err := w.v.bound(ctx, w.bsc, w.st, w.lo)
			if err != nil {
				return fmt.Errorf("find the chunk after key %q: %w", w.lo, err)
			}
			w.ahead = &Chunk{Range: watermark.Range{Table: w.table, Lo: w.lo, Hi: hi}}
			w.lo, w.walking = hi, more
		}
		if w.ahead == nil || !room || w.p.inflight >= w.threads {
			return nil
		}
		w.p.send(task{seq: w.next, c: *w.ahead, last: w.retries == 0, frozen: w.frozen})
		w.next++
		w.ahead = nil
	}
}

// learned brings the stride up to what the next bound may learn from: the
// first checks of the chunks up to threads places back, observed in order
// and no further, so the chunks do not depend on which check ends first.
// It is false while one of them is still under way.
func (w *walker) learned() bool {
	if w.st == nil {
		return true
	}
	for w.observed <= w.next-w.threads {
		c, ok := w.first[w.observed]
		if !ok {
			return false
		}
		w.st.observe(c.Lo, c.Hi, c.SourceRows)
		delete(w.first, w.observed)
		w.observed++
	}
	return true
}

// record takes a check's outcome: its first check is kept for the stride, a
// chunk that differs with a re-check to come waits for the next Settle,
// anything else is final.
func (w *walker) record(t task) {
	if w.v.checked != nil {
		w.v.checked(t.attempt, t.c.differs())
	}
	if t.attempt == 0 && w.st != nil {
		w.first[t.seq] = t.c
	}
	if t.c.differs() && !t.last {
		w.pending = append(w.pending, t)
		return
	}
	w.final[t.seq] = t.c
}

// freeze is called once, when a chunk first differs: writes are landing on
// the table, and comparing it in one snapshot per side (freeze.go) beats
// settling for chunk after chunk. A table nobody writes never pays for the
// lock. The checks under way end first, so every session is idle; if the
// freeze takes, the chunks waiting for a settle are checked once more in
// the snapshots, finally, and so is every chunk after them.
func (w *walker) freeze(ctx context.Context) error {
	scs := w.scopes
	w.scopes = nil
	for w.p.inflight > 0 {
		t := w.p.receive()
		if t.err != nil {
			return t.err
		}
		w.record(t)
	}
	held, err := w.v.freeze(ctx, w.table, scs)
	if w.v.OnFreeze != nil {
		w.v.OnFreeze(w.table, held, err)
	}
	if errors.Is(err, errNotFrozen) {
		return nil // chunk by chunk, with settles
	}
	if err != nil {
		return fmt.Errorf("freeze: %w", err)
	}
	w.frozen, w.retries = true, 0
	w.recheck()
	return nil
}

// settle lets the target catch up once, then checks every pending chunk again.
func (w *walker) settle(ctx context.Context) error {
	if err := w.v.Settle(ctx); err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	w.recheck()
	return nil
}

// recheck sends every pending chunk to be checked once more: its last check
// once the retries are spent, and always in the table's snapshots (where
// freeze set retries to 0).
func (w *walker) recheck() {
	for _, t := range w.pending {
		t.attempt++
		t.last, t.frozen = t.attempt >= w.retries, w.frozen
		w.p.send(t)
	}
	w.pending = w.pending[:0]
}

// commit counts the finished chunks that follow the prefix, in order, and
// reports each to Progress and the checkpoint.
func (w *walker) commit() error {
	for c, ok := w.final[w.prefix]; ok; c, ok = w.final[w.prefix] {
		delete(w.final, w.prefix)
		w.prefix++
		if c.differs() {
			w.res.Mismatches = append(w.res.Mismatches, c)
		}
		w.res.Chunks++
		w.res.Rows += c.SourceRows
		if w.v.Progress != nil {
			w.v.Progress(w.table, c.SourceRows)
		}
		if w.done != nil {
			if err := w.done(c.Hi, w.res); err != nil {
				return err
			}
		}
	}
	return nil
}

// boundSession is sc on a source session of its own, for the walk's bound
// queries while the workers use sc's.
func (v *Verifier) boundSession(ctx context.Context, sc *scope) (*scope, *sql.Conn, error) {
	conn, err := chunk.Session(ctx, v.Source, chunk.UTC)
	if err != nil {
		return nil, nil, err
	}
	b := *sc
	b.src, b.dst = conn, nil
	return &b, conn, nil
}
