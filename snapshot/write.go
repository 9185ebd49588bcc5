package snapshot

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/shardctl/shardctl/chunk"
	"github.com/shardctl/shardctl/dbutil"
)

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
	turn    chan struct{} // when not nil, the writers take turns at writing and overlap only their commits (hasAutoInc)
}

// write is one writer: it takes chunks off ch and commits each on its own
// target session until ch closes or ctx is cancelled. A writer that takes
// turns and loads with LOAD DATA takes, once its turn comes, the chunks
// waiting behind its own into the same statement (up to groupChunks): the
// turns serialize the writes anyway, the turn was held through 97-99% of the
// rows phase (the target, not the reader, sets the pace), and each statement
// costs the target round trips it waits through. Measured, 1M sysbench rows
// on MariaDB, each round beside the target's floor (one LOAD DATA of the same
// rows, then ADD KEY), load 2-8: a chunk per statement 1.23, 1.28, 1.40× the
// floor; up to 4 chunks 1.02, 0.80, 0.67×; up to 8 0.86, 0.99×. The reads
// stay ChunkRows long and each chunk counts in the watermark on its own.
func (c *Copier) write(ctx context.Context, ch <-chan batch, w *writer, tr *tracker) error {
	conn, err := chunk.Session(ctx, c.Target, writerSetup...)
	if err != nil {
		return err
	}
	defer chunk.Release(conn)
	stmts := &stmtCache{conn: conn, text: w.ins}
	defer stmts.close()
	group := 1
	if w.turn != nil && w.load != nil {
		group = groupChunks
	}
	var bs []batch
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
		bs = append(bs[:0], b)
		for attempt := 0; ; attempt++ {
			err = inTurn(ctx, conn, w.turn, func() error {
				if w.load != nil {
					bs, _ = gather(ch, bs, group)
					return loadChunks(ctx, conn, w.load, bs)
				}
				return writeChunk(ctx, stmts, b, w.ncols, w.stmtCap)
			})
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
			return fmt.Errorf("chunk ending at key %q: %w", bs[len(bs)-1].last, err)
		}
		for _, b := range bs {
			if err := tr.committed(b); err != nil {
				return err
			}
		}
	}
}

// groupChunks is how many chunks one LOAD DATA of a writer that takes turns
// may carry (write); a variable so the copy benchmark can compare.
var groupChunks = 4

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
// INSERT, or several when the chunk is larger than a statement may be, in
// the chunk's transaction. Prepared statements send values in the binary
// protocol: no escaping on our side and no parsing of literals on the server
// (measured: less CPU on both sides than interpolated text).
func writeChunk(ctx context.Context, stmts *stmtCache, b batch, ncols int, stmtCap int64) error {
	per := rowsPerStmt(b, ncols, stmtCap)
	for done := 0; done < b.rows; done += per {
		n := min(per, b.rows-done)
		st, err := stmts.get(ctx, n)
		if err != nil {
			return err
		}
		if _, err := st.ExecContext(ctx, b.args[done*ncols:(done+n)*ncols]...); err != nil {
			return err
		}
	}
	return nil
}

// hasAutoInc reports whether the target table has an AUTO_INCREMENT column.
// On MariaDB, the writers of such a table take turns (writer.turn): every
// row written to it latches the primary key's root page, where InnoDB keeps
// the persistent counter (MDEV-6076), so writers inserting at once only spin
// on that latch. Measured with 1M sysbench rows through LOAD DATA, binlog on:
// two sessions at once took 3.1 s and 5.5 target CPU-s, one took 3.4 s and
// 3.3 CPU-s, and without AUTO_INCREMENT two took 2.3 s and 4.0 CPU-s.
// MySQL keeps the counter elsewhere and showed no such difference.
func hasAutoInc(ctx context.Context, db *sql.DB, schema, table string) (bool, error) {
	var n int
	err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND EXTRA LIKE '%auto_increment%'`, schema, table).Scan(&n)
	return n > 0, err
}

// inTurn runs write in a transaction of its own on conn and commits it. With
// a turn, write runs only while this writer holds it, and the commit (which
// waits for the log flush on a durable target) after it gives the turn back,
// so the next writer's rows go in meanwhile. The transaction is opened with
// statements rather than a *sql.Tx so the writer's prepared INSERTs run in it
// as they are (a Tx would prepare them again for every chunk).
func inTurn(ctx context.Context, conn *sql.Conn, turn chan struct{}, write func() error) error {
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	var err error
	if turn != nil {
		select {
		case turn <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		err = write()
		<-turn
	} else {
		err = write()
	}
	if err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return err
	}
	done = true
	return nil
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
