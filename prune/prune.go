// Package prune deletes rows in small chunks: the rows a shard holds but no
// longer owns (MySQL Fabric's prune_shard), or every row of a moved shard's
// tables before the schema is dropped.
//
// Each chunk is bounded by primary-key values found with a keyset walk that
// starts at the previous chunk's bound, so a filter no index serves (MD5 of a
// column) still reads each row about once in all, never once per chunk. Each
// DELETE is its own autocommitted statement on a session that passes
// shardctl's write fence, and the watermark is saved after each one.
package prune

import (
	"context"
	"database/sql"
	"fmt"

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
}

const defaultChunkRows = 1000

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
	// The fence's triggers reject other sessions' writes; ours pass. Foreign
	// keys are not checked: InnoDB then takes no CASCADE or SET NULL action,
	// so exactly the named rows go and nothing reaches rows the operation
	// does not own (preflight refuses keys that cross shards; callers delete
	// children first with Order). Guarded triggers do not fire.
	conn, err := chunk.Session(ctx, p.DB, fence.BypassSQL, chunk.UTC, "SET SESSION foreign_key_checks = 0", schemaobj.SkipSQL)
	if err != nil {
		return w, wrap("open session", err)
	}
	defer chunk.Release(conn)
	key, err := chunk.LoadKey(ctx, conn, p.Schema, t.Name, t.Index(), t.PK)
	if err != nil {
		return w, wrap("primary key", err)
	}
	where, whereArgs := t.Filter.SQL(dbutil.QuoteIdent)
	del := "DELETE FROM " + dbutil.Table(p.Schema, t.Name) + " WHERE "
	for {
		if err := ctx.Err(); err != nil {
			return w, wrap("interrupted", err)
		}
		if p.Throttle != nil {
			if err := p.Throttle(ctx); err != nil {
				return w, wrap("throttle", err)
			}
		}
		upper, more, err := chunk.Upper(ctx, conn, key, w.After, where, whereArgs, n)
		if err != nil {
			return w, wrap(fmt.Sprintf("find the chunk after key %q", w.After), err)
		}
		var hi []string // the last chunk is open-ended: fewer than n rows remain after w.After
		if more {
			hi = upper
		}
		rng, args, err := key.Range(w.After, hi)
		if err != nil {
			return w, wrap("chunk bounds", err)
		}
		res, err := conn.ExecContext(ctx, del+rng+" AND "+where, append(args, whereArgs...)...)
		if err != nil {
			return w, wrap(fmt.Sprintf("delete the chunk (%q, %q]", w.After, hi), err)
		}
		d, err := res.RowsAffected()
		if err != nil {
			return w, wrap("delete", err)
		}
		next := w
		next.Rows += d
		if more {
			next.After = upper
		} else {
			next.Done = true
		}
		if p.Progress != nil {
			p.Progress(t.Name, d)
		}
		if save != nil {
			if err := save(next); err != nil {
				return w, wrap("save watermark", err)
			}
		}
		w = next
		if w.Done {
			return w, nil
		}
	}
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
