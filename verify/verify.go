// Package verify compares the rows in scope of a table on a source and a
// target server without any replication link between them: both sides run
// the same chunked, NULL-safe checksum query and the results are compared
// chunk by chunk.
//
// Chunk boundaries come from the source (keyset on the primary key, with the
// table's filter). Each chunk is its own short statement on each side, so no
// long snapshot is held; the last chunk is open-ended, so rows the target
// holds beyond the source's last key are counted too.
package verify

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"

	"github.com/shardctl/shardctl/chunk"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/tables"
	"github.com/shardctl/shardctl/watermark"
)

// Chunk is one compared range of primary keys: Lo < key <= Hi, where a nil
// Lo starts at the first key and a nil Hi runs past the last.
type Chunk struct {
	watermark.Range
	SourceRows int64  `json:"source_rows"`
	TargetRows int64  `json:"target_rows"`
	SourceSum  string `json:"source_sum"`
	TargetSum  string `json:"target_sum"`
	// Changing: the source rows changed between the re-checks, so the chunk
	// differed because writes kept landing on it, not necessarily because the
	// copy is wrong. Callers re-check such chunks where the source is still.
	Changing bool `json:"changing,omitempty"`
}

// Result sums up a verification. Rows counts source rows.
type Result struct {
	Tables     int     `json:"tables"`
	Chunks     int     `json:"chunks"`
	Rows       int64   `json:"rows"`
	Mismatches []Chunk `json:"mismatches,omitempty"`
}

// Verifier compares Source.SourceSchema with Target.TargetSchema.
type Verifier struct {
	Source, Target             *sql.DB
	SourceSchema, TargetSchema string
	ChunkRows                  int                             // rows per chunk, default 5000
	Settle                     func(ctx context.Context) error // optional: on a mismatch, called (e.g. to let the binlog tail catch up) before the chunk is checked again
	Retries                    int                             // re-checks after Settle, default 5 when Settle is set; none without Settle
	Progress                   func(table string, rows int64)  // optional, source rows of each chunk
}

const (
	defaultChunkRows = 5000
	defaultRetries   = 5
)

// Table verifies one table. A mismatch does not stop it: every chunk is
// checked and every mismatching chunk reported.
func (v *Verifier) Table(ctx context.Context, t tables.Table) (Result, error) {
	res := Result{Tables: 1}
	wrap := func(step string, err error) error {
		return fmt.Errorf("verify %s.%s against %s.%s: %s: %w", v.SourceSchema, t.Name, v.TargetSchema, t.Name, step, err)
	}
	src, err := chunk.Session(ctx, v.Source, chunk.UTC)
	if err != nil {
		return res, wrap("open source session", err)
	}
	defer chunk.Release(src)
	dst, err := chunk.Session(ctx, v.Target, chunk.UTC)
	if err != nil {
		return res, wrap("open target session", err)
	}
	defer chunk.Release(dst)

	cols, err := chunk.Probe(ctx, src, v.SourceSchema, t.Name, t.Columns)
	if err != nil {
		return res, wrap("read source columns", err)
	}
	if _, err := chunk.Probe(ctx, dst, v.TargetSchema, t.Name, t.Columns); err != nil {
		return res, wrap("read target columns", err)
	}
	key, _, err := chunk.KeyAmong(v.SourceSchema, t.Name, t.PK, cols)
	if err != nil {
		return res, wrap("primary key", err)
	}
	where, whereArgs := t.Filter.SQL(dbutil.QuoteIdent)
	sum := checksumSQL(cols)
	n := v.ChunkRows
	if n <= 0 {
		n = defaultChunkRows
	}
	retries := 0
	if v.Settle != nil {
		retries = v.Retries
		if retries == 0 {
			retries = defaultRetries
		}
	}

	var lo []string
	for {
		if err := ctx.Err(); err != nil {
			return res, wrap("interrupted", err)
		}
		hi, more, err := chunk.Upper(ctx, src, key, lo, where, whereArgs, n)
		if err != nil {
			return res, wrap(fmt.Sprintf("find the chunk after key %q", lo), err)
		}
		rng, rngArgs, err := key.Range(lo, hi)
		if err != nil {
			return res, wrap("chunk bounds", err)
		}
		cond := rng + " AND " + where
		args := append(rngArgs, whereArgs...)
		c := Chunk{Range: watermark.Range{Table: t.Name, Lo: lo, Hi: hi}}
		for attempt := 0; ; attempt++ {
			before := c.SourceSum
			if err := v.check(ctx, src, dst, t.Name, sum, cond, args, &c); err != nil {
				return res, wrap(fmt.Sprintf("checksum chunk (%q, %q]", lo, hi), err)
			}
			if attempt > 0 && c.SourceSum != before {
				c.Changing = true
			}
			if c.SourceRows == c.TargetRows && c.SourceSum == c.TargetSum || attempt >= retries {
				break
			}
			if err := v.Settle(ctx); err != nil {
				return res, wrap("settle", err)
			}
		}
		if c.SourceRows != c.TargetRows || c.SourceSum != c.TargetSum {
			res.Mismatches = append(res.Mismatches, c)
		}
		res.Chunks++
		res.Rows += c.SourceRows
		if v.Progress != nil {
			v.Progress(t.Name, c.SourceRows)
		}
		if !more {
			return res, nil
		}
		lo = hi
	}
}

// Recheck compares the given chunks of t once each and returns those that
// still differ: the pipeline re-checks chunks that kept changing under writes
// while the source is fenced and the target has applied everything.
func (v *Verifier) Recheck(ctx context.Context, t tables.Table, cs []Chunk) ([]Chunk, error) {
	wrap := func(err error) error {
		return fmt.Errorf("verify %s.%s against %s.%s: re-check: %w", v.SourceSchema, t.Name, v.TargetSchema, t.Name, err)
	}
	src, err := chunk.Session(ctx, v.Source, chunk.UTC)
	if err != nil {
		return nil, wrap(err)
	}
	defer chunk.Release(src)
	dst, err := chunk.Session(ctx, v.Target, chunk.UTC)
	if err != nil {
		return nil, wrap(err)
	}
	defer chunk.Release(dst)
	cols, err := chunk.Probe(ctx, src, v.SourceSchema, t.Name, t.Columns)
	if err != nil {
		return nil, wrap(err)
	}
	key, _, err := chunk.KeyAmong(v.SourceSchema, t.Name, t.PK, cols)
	if err != nil {
		return nil, wrap(err)
	}
	where, whereArgs := t.Filter.SQL(dbutil.QuoteIdent)
	sum := checksumSQL(cols)
	var differ []Chunk
	for _, c := range cs {
		rng, rngArgs, err := key.Range(c.Lo, c.Hi)
		if err != nil {
			return nil, wrap(err)
		}
		c.Changing = false
		if err := v.check(ctx, src, dst, t.Name, sum, rng+" AND "+where, append(rngArgs, whereArgs...), &c); err != nil {
			return nil, wrap(err)
		}
		if c.SourceRows != c.TargetRows || c.SourceSum != c.TargetSum {
			differ = append(differ, c)
		}
	}
	return differ, nil
}

// All verifies each table in turn and adds up the results.
func (v *Verifier) All(ctx context.Context, ts []tables.Table) (Result, error) {
	var res Result
	for _, t := range ts {
		r, err := v.Table(ctx, t)
		res.Tables += r.Tables
		res.Chunks += r.Chunks
		res.Rows += r.Rows
		res.Mismatches = append(res.Mismatches, r.Mismatches...)
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// check runs the chunk's checksum on both sides at once.
func (v *Verifier) check(ctx context.Context, src, dst *sql.Conn, table, sum, cond string, args []any, c *Chunk) error {
	var wg sync.WaitGroup
	var srcErr error
	wg.Go(func() {
		c.SourceRows, c.SourceSum, srcErr = checksum(ctx, src, v.SourceSchema, table, sum, cond, args)
	})
	var dstErr error
	c.TargetRows, c.TargetSum, dstErr = checksum(ctx, dst, v.TargetSchema, table, sum, cond, args)
	wg.Wait()
	if srcErr != nil {
		return fmt.Errorf("source: %w", srcErr)
	}
	if dstErr != nil {
		return fmt.Errorf("target: %w", dstErr)
	}
	return nil
}

func checksum(ctx context.Context, q dbutil.Querier, schema, table, sum, cond string, args []any) (int64, string, error) {
	var rows int64
	var s string
	err := q.QueryRowContext(ctx, "SELECT COUNT(*), "+sum+" FROM "+dbutil.Table(schema, table)+
		" FORCE INDEX (PRIMARY) WHERE "+cond, args...).Scan(&rows, &s)
	return rows, s, err
}

// checksumSQL is an order-independent 64-bit checksum of the rows: the XOR of
// the first 64 bits of each row's MD5. CONCAT_WS skips NULLs, so ISNULL
// markers tell NULL from an empty string; FLOAT goes through DOUBLE because
// its text keeps only 6 digits.
func checksumSQL(cols []chunk.Column) string {
	vals := make([]string, 0, 2*len(cols))
	for _, c := range cols {
		vals = append(vals, c.Expr())
	}
	for _, c := range cols {
		vals = append(vals, "ISNULL("+dbutil.QuoteIdent(c.Name)+")")
	}
	return "COALESCE(BIT_XOR(CAST(CONV(SUBSTRING(MD5(CONCAT_WS('#', " + strings.Join(vals, ", ") +
		")), 1, 16), 16, 10) AS UNSIGNED)), 0)"
}
