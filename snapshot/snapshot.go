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
	Writers                    int                             // writer goroutines per table, default 3
	Throttle                   func(ctx context.Context) error // optional, called before each chunk is read (may sleep)
	ChunkTime                  time.Duration                   // optional: a chunk whose read takes longer is followed by a smaller one
	Progress                   func(table string, rows int64)  // optional, rows added by each chunk; called from several goroutines
	NoLoadData                 bool                            // write with multi-row INSERTs even where the target allows LOAD DATA LOCAL
	IndexesFirst               bool                            // create plain secondary indexes with the table instead of after its rows
	Readers                    int                             // readers per large table, each on its own key range; default 1 (see defaultReaders)
	SplitRows                  int64                           // a table with more rows left than this (estimated) is split among Readers; default 200000
}

const (
	defaultChunkRows = 5000
	defaultWriters   = 3
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
// on the source describes it. Tables already there are left alone.
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
	// Generated columns are computed by the target: they are not written, and
	// read only when part of the key.
	gen, err := generatedColumns(ctx, src, c.SourceSchema, t.Name)
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
	key, keyPos, err := chunk.KeyAmong(c.SourceSchema, t.Name, t.PK, cols)
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
	r := &reader{
		c: c, t: t, conn: src, cols: cols, written: written, key: key, keyPos: keyPos, budget: budget,
		limit: c.chunkRows(), load: load,
	}
	r.where, r.whereArgs = t.Filter.SQL(dbutil.QuoteIdent)
	r.query = "SELECT " + selectList(cols) + " FROM " + dbutil.Table(c.SourceSchema, t.Name) + " FORCE INDEX (PRIMARY) WHERE "

	bounds, err := c.split(ctx, src, t, key, r.where, r.whereArgs, from)
	if err != nil {
		return from, wrap("split into key ranges", err)
	}

	parent := ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	tr := newTracker(from, t.Name, save, c.Progress)
	tr.parts = len(bounds) + 1
	ch := make(chan batch, c.writers())
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
	if load {
		w.load = func(name string, replace bool) string { return c.loadText(t.Name, cols[:written], name, replace) }
	}
	for range c.writers() {
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

func (c *Copier) writers() int {
	if c.Writers > 0 {
		return c.Writers
	}
	return defaultWriters
}

// generatedColumns names the generated (virtual or stored) columns of schema.table.
func generatedColumns(ctx context.Context, q dbutil.Querier, schema, table string) (map[string]bool, error) {
	gen := map[string]bool{}
	var n string
	err := dbutil.ScanEach(ctx, q, `SELECT COLUMN_NAME FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND COALESCE(GENERATION_EXPRESSION, '') <> ''`, []any{schema, table},
		[]any{&n}, func() error { gen[n] = true; return nil })
	return gen, err
}

func selectList(cols []chunk.Column) string {
	e := make([]string, len(cols))
	for i, c := range cols {
		e[i] = c.Expr()
	}
	return strings.Join(e, ", ")
}

// insertText returns the INSERT for n rows.
func (c *Copier) insertText(table string, cols []chunk.Column, key chunk.Key) func(n int) string {
	names := make([]string, len(cols))
	for i, col := range cols {
		names[i] = col.Name
	}
	head := "INSERT INTO " + dbutil.Table(c.TargetSchema, table) + " (" + dbutil.QuoteIdents(names) + ") VALUES "
	row := "(" + dbutil.Placeholders(len(cols)) + ")"
	inKey := map[string]bool{}
	for _, n := range key.Names() {
		inKey[n] = true
	}
	var upd []string
	for _, n := range names {
		if !inKey[n] {
			upd = append(upd, dbutil.QuoteIdent(n)+" = VALUES("+dbutil.QuoteIdent(n)+")")
		}
	}
	if len(upd) == 0 { // every column is in the key: nothing to update, but the clause keeps re-copies quiet
		k := dbutil.QuoteIdent(names[0])
		upd = []string{k + " = " + k}
	}
	tail := " ON DUPLICATE KEY UPDATE " + strings.Join(upd, ", ")
	return func(n int) string {
		var b strings.Builder
		b.Grow(len(head) + n*(len(row)+1) + len(tail))
		b.WriteString(head)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(row)
		}
		b.WriteString(tail)
		return b.String()
	}
}

// writer says how a table's chunks are written.
type writer struct {
	ins     func(rows int) string                  // multi-row INSERT
	load    func(name string, replace bool) string // LOAD DATA LOCAL; nil: INSERT
	ncols   int
	stmtCap int64
}

// write is one writer: it takes chunks off ch and commits each on its own
// target session until ch closes or ctx is cancelled.
func (c *Copier) write(ctx context.Context, ch <-chan batch, w *writer, tr *tracker) error {
	conn, err := chunk.Session(ctx, c.Target, writerSetup...)
	if err != nil {
		return err
	}
	defer chunk.Release(conn)
	stmts := &stmtCache{conn: conn, text: w.ins}
	defer stmts.close()
	for {
		var b batch
		var ok bool
		select {
		case b, ok = <-ch:
			if !ok {
				return nil
			}
		case <-ctx.Done():
			return nil
		}
		for attempt := 0; ; attempt++ {
			if w.load != nil {
				err = loadChunk(ctx, conn, w.load, b)
			} else {
				err = writeChunk(ctx, conn, stmts, b, w.ncols, w.stmtCap)
			}
			if err == nil || attempt >= lockRetries || !dbutil.IsRetryableLockErr(err) {
				break
			}
			select {
			case <-time.After(time.Duration(attempt+1) * 50 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err != nil {
			return fmt.Errorf("chunk ending at key %q: %w", b.last, err)
		}
		if err := tr.committed(b); err != nil {
			return err
		}
	}
}

const (
	// maxParams is the protocol's limit on placeholders in one prepared statement.
	maxParams = 65535
	// stmtBytes caps the values one INSERT carries (half the target's
	// max_allowed_packet if that is less). Fewer, larger statements cost the
	// target less CPU (measured: about 1 s per million rows against 200 KB
	// statements); a chunk of a sysbench-like table (5000 rows, about 1.1 MB)
	// goes in one statement.
	stmtBytes = 2 << 20
)

// rowsPerStmt is how many rows of b one INSERT carries: the chunk split
// evenly into as few statements as the limits allow, so full chunks reuse
// the same prepared statement.
func rowsPerStmt(b batch, ncols int, stmtCap int64) int {
	n := max((b.rows+maxParams/ncols-1)/(maxParams/ncols), int((b.bytes+stmtCap-1)/stmtCap), 1)
	return (b.rows + n - 1) / n
}

// writeChunk writes one chunk as one transaction: a single prepared multi-row
// INSERT, or several in a transaction when the chunk is larger than a
// statement may be. Prepared statements send values in the binary protocol:
// no escaping on our side and no parsing of literals on the server (measured:
// less CPU on both sides than interpolated text).
func writeChunk(ctx context.Context, conn *sql.Conn, stmts *stmtCache, b batch, ncols int, stmtCap int64) error {
	per := rowsPerStmt(b, ncols, stmtCap)
	if b.rows <= per {
		st, err := stmts.get(ctx, b.rows)
		if err != nil {
			return err
		}
		_, err = st.ExecContext(ctx, b.args...)
		return err
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	for done := 0; done < b.rows; done += per {
		n := min(per, b.rows-done)
		st, err := stmts.get(ctx, n)
		if err != nil {
			return err
		}
		if _, err := tx.StmtContext(ctx, st).ExecContext(ctx, b.args[done*ncols:(done+n)*ncols]...); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// stmtCache holds a writer's prepared INSERTs by row count; chunks are
// mostly full, so a few entries suffice and the server keeps few statements.
type stmtCache struct {
	conn  *sql.Conn
	text  func(int) string
	rows  []int
	stmts []*sql.Stmt
}

const stmtCacheSize = 4

func (s *stmtCache) get(ctx context.Context, n int) (*sql.Stmt, error) {
	for i, r := range s.rows {
		if r == n {
			return s.stmts[i], nil
		}
	}
	st, err := s.conn.PrepareContext(ctx, s.text(n))
	if err != nil {
		return nil, err
	}
	if len(s.rows) == stmtCacheSize { // drop the oldest
		_ = s.stmts[0].Close()
		s.rows, s.stmts = s.rows[1:], s.stmts[1:]
	}
	s.rows, s.stmts = append(s.rows, n), append(s.stmts, st)
	return st, nil
}

func (s *stmtCache) close() {
	for _, st := range s.stmts {
		_ = st.Close()
	}
}

// reader reads a table's chunks from the source in key order.
type reader struct {
	c         *Copier
	t         tables.Table
	conn      *sql.Conn
	cols      []chunk.Column // read; the first `written` are written
	written   int
	key       chunk.Key
	keyPos    []int
	budget    int64 // bytes of values per chunk
	load      bool  // encode rows as LOAD DATA text instead of arguments
	limit     int   // rows asked for by the next read
	query     string
	where     string
	whereArgs []any
}

// run reads the chunks of key range (after, hi] (hi nil: no end) and
// returns how many it sent.
func (r *reader) run(ctx context.Context, part int, after, hi []string, ch chan<- batch) (int, error) {
	full := r.c.chunkRows()
	for seq := 0; ; seq++ {
		if err := ctx.Err(); err != nil {
			return seq, nil // the canceller reports why
		}
		if r.c.Throttle != nil {
			if err := r.c.Throttle(ctx); err != nil {
				return seq, fmt.Errorf("throttle: %w", err)
			}
		}
		began := time.Now()
		b, cut, err := r.read(ctx, after, hi)
		if err != nil {
			return seq, err
		}
		took := time.Since(began)
		if b.rows == 0 {
			putBuf(b.data)
			return seq, nil
		}
		b.part, b.seq = part, seq
		select {
		case ch <- b:
		case <-ctx.Done():
			return seq, nil
		}
		after = b.last
		switch {
		case cut: // rows are big: ask for no more than fitted this time
			r.limit = b.rows
		case b.rows < r.limit:
			return seq + 1, nil // the range is exhausted; later rows are the binlog tail's
		case r.c.ChunkTime > 0 && took > r.c.ChunkTime: // a loaded source: smaller chunks, shorter reads
			r.limit = max(100, int(float64(r.limit)*float64(r.c.ChunkTime)/float64(took)))
		default:
			r.limit = min(full, r.limit*2)
		}
	}
}

// read reads one chunk after `after`, up to hi (nil: no end). cut reports
// that it stopped early because the chunk reached its byte budget.
func (r *reader) read(ctx context.Context, after, hi []string) (b batch, cut bool, err error) {
	rng, args, err := r.key.Range(after, hi)
	if err != nil {
		return b, false, err
	}
	q := r.query + rng + " AND " + r.where + " ORDER BY " + r.key.OrderBy() + " LIMIT ?"
	args = append(append(args, r.whereArgs...), r.limit)
	rows, err := r.conn.QueryContext(ctx, q, args...)
	if err != nil {
		return b, false, fmt.Errorf("after key %q: %w", after, err)
	}
	defer rows.Close()
	raw, dest := dbutil.Dest[sql.RawBytes](len(r.cols))
	lastKey := make([][]byte, len(r.keyPos))
	var buf []byte
	if r.load {
		b.data = getBuf()
		buf = *b.data
		defer func() { *b.data = buf }()
	} else {
		b.args = make([]any, 0, r.limit*r.written)
	}
	var size int64
	var mem arena
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return b, false, err
		}
		for i, v := range raw[:r.written] {
			switch {
			case r.load:
				if i > 0 {
					buf = append(buf, '\t')
				}
				buf = appendField(buf, v)
			case v == nil:
				b.args = append(b.args, nil)
			case r.cols[i].Kind == chunk.Bit:
				// BIT as a number: MySQL refuses its raw bytes as a string
				// parameter (error 3988, they are not valid text).
				var n uint64
				for _, c := range v {
					n = n<<8 | uint64(c)
				}
				b.args = append(b.args, n)
			default:
				b.args = append(b.args, mem.copy(v))
			}
			size += int64(len(v)) + valueOverhead
		}
		if r.load {
			buf = append(buf, '\n')
		}
		for i, p := range r.keyPos {
			lastKey[i] = append(lastKey[i][:0], raw[p]...)
		}
		b.rows++
		if size >= r.budget && b.rows < r.limit {
			cut = true
			break
		}
	}
	if err := rows.Err(); err != nil {
		return b, false, fmt.Errorf("after key %q: %w", after, err)
	}
	b.bytes = size
	if b.rows > 0 {
		b.last = r.key.Text(lastKey)
	}
	return b, cut, nil
}

// arena copies a chunk's values into a few large blocks instead of one
// allocation per value. Values are written as []byte through prepared
// statements, which send them as strings in the connection's character set:
// the server converts them to each column's charset (an interpolated
// _binary literal would not be converted, and a latin1 column would store
// the UTF-8 bytes).
type arena struct{ buf []byte }

const arenaBlock = 64 << 10

// copy returns a copy of raw; an empty value stays non-nil (nil is NULL).
func (a *arena) copy(raw []byte) []byte {
	if a.buf == nil || len(raw) > cap(a.buf)-len(a.buf) {
		a.buf = make([]byte, 0, max(arenaBlock, len(raw)))
	}
	off := len(a.buf)
	a.buf = append(a.buf, raw...)
	return a.buf[off:len(a.buf):len(a.buf)]
}

// tracker turns chunk commits, which arrive in any order, into the watermark
// of the longest committed prefix.
type tracker struct {
	mu       sync.Mutex
	wm       watermark.Mark   // progress: the committed prefix
	saved    watermark.Mark   // the last watermark save accepted
	parts    int              // key ranges, read at once; the prefix runs through them in order
	part     int              // the range the prefix is in
	next     int              // lowest sequence number of that range not yet committed
	ends     map[int]int      // range → how many chunks it had, once its reader is done
	pending  map[[2]int]batch // committed chunks after a gap (args dropped), by range and sequence
	save     func(watermark.Mark) error
	table    string
	progress func(string, int64)
}

func newTracker(from watermark.Mark, table string, save func(watermark.Mark) error, progress func(string, int64)) *tracker {
	return &tracker{wm: from, saved: from, parts: 1, ends: map[int]int{}, pending: map[[2]int]batch{}, save: save, table: table, progress: progress}
}

func (tr *tracker) committed(b batch) error {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.progress != nil {
		tr.progress(tr.table, int64(b.rows))
	}
	b.args = nil
	putBuf(b.data)
	b.data = nil
	tr.pending[[2]int{b.part, b.seq}] = b
	return tr.advance()
}

// ended records that range part had n chunks.
func (tr *tracker) ended(part, n int) error {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.ends[part] = n
	return tr.advance()
}

// advance extends the committed prefix as far as it goes and saves it.
func (tr *tracker) advance() error {
	advanced := false
	for {
		if p, ok := tr.pending[[2]int{tr.part, tr.next}]; ok {
			delete(tr.pending, [2]int{tr.part, tr.next})
			tr.next++
			tr.wm.After = p.last
			tr.wm.Rows += int64(p.rows)
			advanced = true
			continue
		}
		if n, ok := tr.ends[tr.part]; ok && n == tr.next && tr.part < tr.parts-1 {
			tr.part, tr.next = tr.part+1, 0
			continue
		}
		break
	}
	if advanced {
		return tr.store()
	}
	return nil
}

// store saves the progress; a failed save leaves the last saved watermark
// in place and the next one saves the whole prefix again.
func (tr *tracker) store() error {
	if tr.save != nil {
		if err := tr.save(tr.wm); err != nil {
			return fmt.Errorf("save watermark: %w", err)
		}
	}
	tr.saved = tr.wm
	return nil
}

func (tr *tracker) finish() error {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.wm.Done = true
	return tr.store()
}

// lastSaved is the watermark a resume would start from.
func (tr *tracker) lastSaved() watermark.Mark {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.saved
}

// split returns the inner bounds of the key ranges a large table's readers
// take: none (one reader) unless more than SplitRows rows are left. Each
// bound is found by walking the primary key, so ranges hold about as many
// rows each whatever the keys look like.
func (c *Copier) split(ctx context.Context, q dbutil.Querier, t tables.Table, key chunk.Key, where string, whereArgs []any, from watermark.Mark) ([][]string, error) {
	readers := c.Readers
	if readers == 0 {
		readers = defaultReaders
	}
	splitRows := c.SplitRows
	if splitRows <= 0 {
		splitRows = defaultSplitRows
	}
	left := t.EstRows - from.Rows
	if readers < 2 || left <= splitRows {
		return nil, nil
	}
	step := int(left / int64(readers))
	var bounds [][]string
	after := from.After
	for range readers - 1 {
		b, ok, err := chunk.Upper(ctx, q, key, after, where, whereArgs, step)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		bounds = append(bounds, b)
		after = b
	}
	return bounds, nil
}
