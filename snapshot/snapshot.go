// Package snapshot copies the rows in scope of a shard's tables from a source
// schema to a target schema on another server, chunk by chunk, with a
// checkpointed watermark so a crashed run resumes where it stopped.
//
// The copy needs no consistent snapshot: the binlog tail replays every change
// since a position taken before the copy started, idempotently, once the copy
// is done. Each chunk is therefore its own short read, and each write is an
// upsert so a chunk copied twice (after a resume) leaves the same rows.
package snapshot

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/shardctl/shardctl/chunk"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/schemaobj"
	"github.com/shardctl/shardctl/tables"
	"github.com/shardctl/shardctl/watermark"
)

// Copier copies tables from Source.SourceSchema to Target.TargetSchema.
type Copier struct {
	Source, Target             *sql.DB
	SourceSchema, TargetSchema string
	ChunkRows                  int                             // rows per chunk, default 5000
	Writers                    int                             // writer goroutines per table; default 3 into MariaDB, 2 into MySQL (see defaultWriters)
	Throttle                   func(ctx context.Context) error // optional, called before each chunk is read (may sleep)
	ChunkTime                  time.Duration                   // optional: a chunk whose read takes longer is followed by a smaller one
	Progress                   func(table string, rows int64)  // optional, rows added by each chunk; called from several goroutines
	NoLoadData                 bool                            // write with multi-row INSERTs even where the target allows LOAD DATA LOCAL
	ConcurrentAutoInc          bool                            // let the writers of a table with an AUTO_INCREMENT column write at once on MariaDB too (see hasAutoInc; for benchmarks)
	IndexesFirst               bool                            // create plain secondary indexes with the table instead of after its rows
	Readers                    int                             // readers per large table, each on its own key range; default 1 (see defaultReaders)
	SplitRows                  int64                           // a table with more rows left than this (estimated) is split among Readers; default 200000
	// WatchDDL stops the copy with ErrDefinitionChanged when a table's
	// columns change on the source while it is copied (ddl.go), before a
	// chunk read after the change is written.
	WatchDDL bool
}

const (
	defaultChunkRows = 5000
	// Writers per table. Chunks arrive in key order, so every writer appends
	// at the primary key's right edge: into MySQL a third writer mostly spins
	// on that page's latch (ut_delay and mutex waits were 3.5% of the
	// target's samples), and two load the same 1M sysbench rows 0.09-0.52 s
	// faster (6 of 6 alternated pairs, docs/BENCHMARKS-history.md). MariaDB's
	// writers of an AUTO_INCREMENT table take turns anyway (hasAutoInc) and
	// showed no such difference.
	defaultWriters      = 3
	defaultWritersMySQL = 2
	// One reader per table: on 2 cores the target's CPU bounds the copy and a
	// second reader showed no gain (docs/BENCHMARKS.md); more cores may differ.
	defaultReaders   = 1
	defaultSplitRows = 200000
	// Per-value allowance for the protocol's type, length and NULL-map bytes.
	valueOverhead = 12
	lockRetries   = 3
)

// writerSetup makes target sessions accept every row the source holds:
// NO_AUTO_VALUE_ON_ZERO keeps an id of 0 (the empty mode drops strictness
// too, so zero dates pass), and foreign keys are not checked because tables
// and chunks arrive in any order.
var writerSetup = []string{
	chunk.UTC,
	"SET SESSION sql_mode = 'NO_AUTO_VALUE_ON_ZERO', foreign_key_checks = 0",
	schemaobj.SkipSQL, // guarded triggers on the target do not fire on copied rows
}

// CreateTables creates the target schema if absent (with the source schema's
// default character set) and each table absent from it, as SHOW CREATE TABLE
// on the source describes it, translated where the target runs the other
// flavor (xflavor). Tables already there are left alone.
func (c *Copier) CreateTables(ctx context.Context, ts []tables.Table) error {
	var cs, coll string
	err := c.Source.QueryRowContext(ctx, `SELECT DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME
		FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?`, c.SourceSchema).Scan(&cs, &coll)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("copy: source schema %s does not exist", c.SourceSchema)
	}
	if err != nil {
		return fmt.Errorf("copy: read source schema %s: %w", c.SourceSchema, err)
	}
	rules, err := Rules(ctx, c.Source, c.Target)
	if err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	coll, res := rules.Schema(c.SourceSchema, coll)
	if err := res.Err(); err != nil {
		return fmt.Errorf("copy: create target schema %s: %w", c.TargetSchema, err)
	}
	_, err = c.Target.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+dbutil.QuoteIdent(c.TargetSchema)+
		" CHARACTER SET "+dbutil.QuoteIdent(cs)+" COLLATE "+dbutil.QuoteIdent(coll))
	if err != nil {
		return fmt.Errorf("copy: create target schema %s: %w", c.TargetSchema, err)
	}
	// USE, so a foreign key's unqualified parent table resolves in the target
	// schema; a permissive sql_mode (as mysqldump's), so a definition the
	// source accepted (a zero-date default made under a permissive mode) is
	// accepted on a target whose default mode is strict.
	conn, err := chunk.Session(ctx, c.Target, "USE "+dbutil.QuoteIdent(c.TargetSchema), "SET SESSION foreign_key_checks = 0",
		"SET SESSION sql_mode = 'NO_AUTO_VALUE_ON_ZERO'")
	if err != nil {
		return fmt.Errorf("copy: open session on target schema %s: %w", c.TargetSchema, err)
	}
	defer chunk.Release(conn)
	ref, err := referencedTables(ctx, c.Source, c.SourceSchema)
	if err != nil {
		return fmt.Errorf("copy: read foreign keys of %s: %w", c.SourceSchema, err)
	}
	for _, t := range ts {
		if err := ctx.Err(); err != nil {
			return err
		}
		var name, ddl string
		if err := c.Source.QueryRowContext(ctx, "SHOW CREATE TABLE "+dbutil.Table(c.SourceSchema, t.Name)).Scan(&name, &ddl); err != nil {
			return fmt.Errorf("copy %s.%s: show create table: %w", c.SourceSchema, t.Name, err)
		}
		ddl, res := rules.Table(t.Name, ddl)
		if err := res.Err(); err != nil {
			return fmt.Errorf("copy %s.%s: %w", c.SourceSchema, t.Name, err)
		}
		if !c.IndexesFirst {
			_, ddl = deferrable(ddl, ref[t.Name]) // built by CopyTable once the rows are in
		}
		rest, ok := strings.CutPrefix(ddl, "CREATE TABLE ")
		if !ok {
			return fmt.Errorf("copy %s.%s: SHOW CREATE TABLE returned %.40q…, not a CREATE TABLE", c.SourceSchema, t.Name, ddl)
		}
		if _, err := conn.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+rest); err != nil {
			return fmt.Errorf("copy %s.%s: create table in %s: %w", c.SourceSchema, t.Name, c.TargetSchema, err)
		}
	}
	return nil
}

// batch is one chunk read from the source, waiting to be written.
type batch struct {
	part  int // the reader's key range, in key order
	seq   int // the chunk's place in its range
	rows  int
	bytes int64    // size of the values, with a per-value allowance
	args  []any    // rows × columns values, row-major (INSERT)
	data  *[]byte  // the rows as LOAD DATA text (LOAD DATA), from bufPool
	last  []string // key of the last row, text form
}

// CopyTable copies the rows of t in scope (t.Filter) whose key is after
// from.After, in key order, one chunk at a time: a keyset read on the source,
// then one multi-row INSERT … ON DUPLICATE KEY UPDATE on the target in its own
// transaction. Chunks are written by several writers at once; save is called
// (from one goroutine at a time) with the watermark of the longest run of
// committed chunks, so a resume never skips a chunk that did not commit
// (save may be nil). The returned watermark is the last one saved (Done when
// the table is finished).
// Long on purpose: the reader, the writers and the watermark's ordering share
// the chunk budget and the run of committed chunks, which read best together.
func (c *Copier) CopyTable(ctx context.Context, t tables.Table, from watermark.Mark, save func(watermark.Mark) error) (watermark.Mark, error) {
	if from.Done {
		return from, nil
	}
	wrap := func(step string, err error) error {
		return fmt.Errorf("copy %s.%s to %s.%s: %s: %w", c.SourceSchema, t.Name, c.TargetSchema, t.Name, step, err)
	}
	src, err := chunk.Session(ctx, c.Source, chunk.UTC)
	if err != nil {
		return from, wrap("open source session", err)
	}
	defer chunk.Release(src)
	var wt *watch
	if c.WatchDDL {
		wt = &watch{schema: c.SourceSchema, table: t.Name}
		if err := wt.start(ctx, src, t.Columns); err != nil {
			return from, wrap("read the table's definition", err)
		}
	}
	// Generated columns are computed by the target: they are not written, and
	// read only when part of the key.
	gen, err := chunk.Generated(ctx, src, c.SourceSchema, t.Name)
	if err != nil {
		return from, wrap("read columns", err)
	}
	var names []string
	for _, n := range t.Columns {
		if !gen[n] {
			names = append(names, n)
		}
	}
	written := len(names)
	for _, n := range t.PK {
		if gen[n] {
			names = append(names, n)
		}
	}
	cols, err := chunk.Probe(ctx, src, c.SourceSchema, t.Name, names)
	if err != nil {
		return from, wrap("read columns", err)
	}
	key, keyPos, err := chunk.KeyAmong(c.SourceSchema, t.Name, t.Index(), t.PK, cols)
	if err != nil {
		return from, wrap("primary key", err)
	}
	var maxPacket int64
	if err := c.Target.QueryRowContext(ctx, "SELECT @@max_allowed_packet").Scan(&maxPacket); err != nil {
		return from, wrap("read target max_allowed_packet", err)
	}
	// A chunk holds at most budget bytes of values (plus one row), so memory
	// stays bounded whatever the row size; each INSERT fits a packet.
	budget := min(max(maxPacket/3, 64<<10), 8<<20)
	stmtCap := min(stmtBytes, max(maxPacket/2, 64<<10))

	f, err := dbutil.FlavorOf(ctx, c.Target)
	if err != nil {
		return from, wrap("read the target's flavor", err)
	}
	load := !c.NoLoadData && loadable(cols[:written], f.MySQL)
	if load {
		if load, err = localInfile(ctx, c.Target); err != nil {
			return from, wrap("read target local_infile", err)
		}
	}
	charset := ""
	if load {
		if charset, err = loadCharset(ctx, c.Target, c.TargetSchema, t.Name); err != nil {
			return from, wrap("read the target's column character sets", err)
		}
	}
	r := &reader{
		c: c, t: t, conn: src, cols: cols, written: written, key: key, keyPos: keyPos, budget: budget,
		limit: c.chunkRows(), load: load, watch: wt,
	}
	r.where, r.whereArgs = t.Filter.SQL(dbutil.QuoteIdent)
	r.query = "SELECT " + selectList(cols) + " FROM " + dbutil.Table(c.SourceSchema, t.Name) + " FORCE INDEX (" + dbutil.QuoteIdent(key.Index) + ") WHERE "

	bounds, err := c.split(ctx, src, t, key, r.where, r.whereArgs, from)
	if err != nil {
		return from, wrap("split into key ranges", err)
	}

	parent := ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	tr := newTracker(from, t.Name, save, c.Progress)
	tr.parts = len(bounds) + 1
	writers := c.writers(f.MySQL)
	ch := make(chan batch, writers)
	var wg, readers sync.WaitGroup
	for part := 0; part <= len(bounds); part++ {
		lo, hi := from.After, []string(nil)
		if part > 0 {
			lo = bounds[part-1]
		}
		if part < len(bounds) {
			hi = bounds[part]
		}
		readers.Go(func() {
			pr := *r
			if part > 0 { // the first range reads on src; the others on sessions of their own
				conn, err := chunk.Session(ctx, c.Source, chunk.UTC)
				if err != nil {
					cancel(wrap("open source session", err))
					return
				}
				defer chunk.Release(conn)
				pr.conn = conn
			}
			n, err := pr.run(ctx, part, lo, hi, ch)
			if err != nil {
				cancel(wrap("read chunk", err))
				return
			}
			if ctx.Err() != nil {
				return // stopped early: the range is not done, the prefix must not pass it
			}
			if err := tr.ended(part, n); err != nil {
				cancel(wrap("write chunk", err))
			}
		})
	}
	wg.Go(func() {
		readers.Wait()
		close(ch)
	})
	w := &writer{ins: c.insertText(t.Name, cols[:written], key), ncols: written, stmtCap: stmtCap}
	if !f.MySQL && !c.ConcurrentAutoInc && writers > 1 {
		serial, err := hasAutoInc(ctx, c.Target, c.TargetSchema, t.Name)
		if err != nil {
			return from, wrap("read the target's AUTO_INCREMENT column", err)
		}
		if serial {
			w.turn = make(chan struct{}, 1)
		}
	}
	if load {
		w.load = func(name string, replace bool) string {
			return c.loadText(t.Name, cols[:written], charset, name, replace)
		}
	}
	for range writers {
		wg.Go(func() {
			if err := c.write(ctx, ch, w, tr); err != nil {
				cancel(wrap("write chunk", err))
			}
		})
	}
	wg.Wait()
	if err := parent.Err(); err != nil {
		return tr.lastSaved(), wrap("interrupted", context.Cause(parent))
	}
	if err := context.Cause(ctx); err != nil {
		return tr.lastSaved(), err // already wrapped by whoever cancelled
	}
	// Before the table is marked done, so a resume builds what a crash left out.
	if err := c.buildIndexes(ctx, t.Name); err != nil {
		return tr.lastSaved(), wrap("build indexes", err)
	}
	if err := tr.finish(); err != nil {
		return tr.lastSaved(), wrap("finish", err)
	}
	return tr.lastSaved(), nil
}

// CopyAll copies every table of ts not yet Done in from (keyed by table
// name), up to parallel tables at a time. The first error cancels the other
// copies and is returned. save is called from several goroutines at once
// (one per table being copied, each table's calls in order) and must be safe
// for that; so must Progress.
func (c *Copier) CopyAll(ctx context.Context, ts []tables.Table, from map[string]watermark.Mark, parallel int, save func(table string, w watermark.Mark) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	sem := make(chan struct{}, max(parallel, 1))
	for _, t := range ts {
		w := from[t.Name]
		if w.Done {
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			var tableSave func(watermark.Mark) error
			if save != nil {
				tableSave = func(w watermark.Mark) error { return save(t.Name, w) }
			}
			if _, err := c.CopyTable(ctx, t, w, tableSave); err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				cancel()
			}
		})
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = fmt.Errorf("copy %s to %s: interrupted: %w", c.SourceSchema, c.TargetSchema, context.Cause(ctx))
	}
	return firstErr
}

func (c *Copier) chunkRows() int {
	if c.ChunkRows > 0 {
		return c.ChunkRows
	}
	return defaultChunkRows
}

func (c *Copier) writers(mysql bool) int {
	switch {
	case c.Writers > 0:
		return c.Writers
	case mysql:
		return defaultWritersMySQL
	}
	return defaultWriters
}
