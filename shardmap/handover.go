package shardmap

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/keyspace"
)

// A mapping added inside the key space another shard owns (a lower bound in
// the open-ended last range, a new ring point) hands that shard's keys over
// without moving a row: a row there would be stranded, and a later prune
// would delete its only copy. It is accepted only when the giving shard
// provably holds no row there.

// RowProbe reports whether table (sharded on column) at loc has a row whose
// key keys selects. A missing schema or table holds no rows.
type RowProbe func(ctx context.Context, loc Location, table, column string, keys keyspace.Filter) (bool, error)

// ShardRows is the RowProbe that reads the shard's server with creds.
func ShardRows(creds dbutil.Creds) RowProbe {
	return func(ctx context.Context, loc Location, table, column string, keys keyspace.Filter) (bool, error) {
		db, err := dbutil.Open(ctx, loc.Addr(), creds, "")
		if err != nil {
			return false, fmt.Errorf("shard %d's server %s: %w", loc.ShardID, loc.Addr(), err)
		}
		defer db.Close()
		keys.Column = column
		where, args := keys.SQL(dbutil.QuoteIdent)
		var one int
		err = db.QueryRowContext(ctx, "SELECT 1 FROM "+dbutil.Table(loc.Schema, table)+" WHERE "+where+" LIMIT 1", args...).Scan(&one)
		if dbutil.IsMissingFunction(err) && len(keys.Arcs) > 0 {
			// A server without MD5() (MySQL 9.6+ as installed): the ring
			// positions are computed here, over the column's values.
			return anyKeyMatches(ctx, db, loc, table, keys)
		}
		switch {
		case err == sql.ErrNoRows:
			return false, nil
		case dbutil.ErrNumber(err) == 1146 || dbutil.ErrNumber(err) == 1049:
			return false, nil
		case err != nil:
			return false, fmt.Errorf("shard %d: look for rows in %s.%s: %w", loc.ShardID, loc.Schema, table, err)
		}
		return true, nil
	}
}

// anyKeyMatches streams the keys of table (through the column's index where
// it has one) and reports whether one passes keys, stopping at the first.
func anyKeyMatches(ctx context.Context, db *sql.DB, loc Location, table string, keys keyspace.Filter) (bool, error) {
	rows, err := db.QueryContext(ctx, "SELECT "+dbutil.QuoteIdent(keys.Column)+" FROM "+dbutil.Table(loc.Schema, table))
	if err != nil {
		return false, fmt.Errorf("shard %d: read the keys of %s.%s: %w", loc.ShardID, loc.Schema, table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var v any
		if err := rows.Scan(&v); err != nil {
			return false, err
		}
		if ok, err := keys.Match(v); err != nil || ok {
			return ok, err
		}
	}
	return false, rows.Err()
}

// handover checks that the shard giving keys to another one holds none of
// its rows there. from is the giving mapping, keys the part handed over.
func (s *Store) handover(ctx context.Context, m *Map, f Function, from Mapping, to int, keys keyspace.Filter) error {
	if from.ShardID == to {
		return nil // the keys stay with the same shard
	}
	cols := sharded(m, f)
	if len(cols) == 0 {
		return nil // no table is sharded by this function: no row can be stranded
	}
	loc, err := m.Location(from.ShardID)
	if err != nil {
		return err
	}
	what := fmt.Sprintf("it would hand keys %s of shard %d (mapping %s) to shard %d without moving rows", describeKeys(keys), from.ShardID, from, to)
	if s.Rows == nil {
		return badInput("%s, and this shardctl cannot read shard %d's server to prove it holds none: use 'shardctl split' to move part of a shard's keys", what, from.ShardID)
	}
	for _, c := range cols {
		has, err := s.Rows(ctx, loc, c.Table, c.Column, keys)
		if err != nil {
			return fmt.Errorf("%s; checking for rows failed: %w", what, err)
		}
		if has {
			// The rows go with their keys through a key move into the
			// receiving shard: a command that runs as printed where the keys
			// can be named; a hash arc's only way is a split at its point.
			if flag, ok := keyspace.KeysFlag(keys); ok {
				return badInput("%s, and shard %d has rows there (table %s): move them with the keys: shardctl move --shard %d %s --into %d", what, from.ShardID, c.Table, from.ShardID, flag, to)
			}
			return badInput("%s, and shard %d has rows there (table %s): use 'shardctl split --shard %d' to move them with the keys", what, from.ShardID, c.Table, from.ShardID)
		}
	}
	return nil
}

func describeKeys(f keyspace.Filter) string {
	var parts []string
	for _, r := range f.Ranges {
		parts = append(parts, r.String())
	}
	for _, a := range f.Arcs {
		parts = append(parts, "arc ("+a.After+", "+a.Upto+"]")
	}
	return strings.Join(parts, " ")
}

// ringGiver returns the mapping that owns the ring position of a new point
// hash, and the arc the new point would take from it.
func ringGiver(ms []Mapping, hash string) (Mapping, keyspace.Arc, bool) {
	var points []string
	for _, mp := range ms {
		points = append(points, mp.Hash)
	}
	if len(points) == 0 {
		return Mapping{}, keyspace.Arc{}, false
	}
	owner := ms[keyspace.Owner(points, hash)]
	all := append(append([]string(nil), points...), hash)
	sort.Strings(all)
	return owner, keyspace.ArcOf(all, hash), true
}

// mapTables are the shard map's own tables, read from its DDL.
func mapTables() map[string]bool {
	out := map[string]bool{}
	re := regexp.MustCompile(`CREATE TABLE IF NOT EXISTS (\w+)`)
	for _, stmt := range schemaDDL {
		if m := re.FindStringSubmatch(stmt); m != nil {
			out[m[1]] = true
		}
	}
	return out
}

// foreignTables lists the tables of schema that are not the shard map's own:
// a schema holding them is a data schema (a shard's, most likely), and the
// map's tables must not be created inside it (later moves would copy them).
func (s *Store) foreignTables(ctx context.Context) ([]string, error) {
	foreign, _, err := splitMapTables(ctx, s.DB, s.Schema)
	if err != nil {
		return nil, fmt.Errorf("shardmap init: %w", err)
	}
	return foreign, nil
}

// mapCore are the tables every shard map has had since its first version:
// a schema that holds them all is a sharding database, whoever made it.
var mapCore = []string{"version", "locations", "partition_functions"}

// HoldsMap reports whether schema on db is a sharding database (it holds a
// shard map's own tables: another fleet's, or one left from an older
// setup), and lists the map tables it holds.
func HoldsMap(ctx context.Context, db *sql.DB, schema string) (bool, []string, error) {
	_, held, err := splitMapTables(ctx, db, schema)
	if err != nil {
		return false, nil, err
	}
	for _, c := range mapCore {
		if !slices.Contains(held, c) {
			return false, held, nil
		}
	}
	return true, held, nil
}

// splitMapTables lists schema's tables, by name, apart: the shard map's own and the others.
func splitMapTables(ctx context.Context, db *sql.DB, schema string) (foreign, own []string, err error) {
	rows, err := db.QueryContext(ctx, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? ORDER BY TABLE_NAME", schema)
	if err != nil {
		return nil, nil, fmt.Errorf("list the tables of %s: %w", schema, err)
	}
	defer rows.Close()
	mine := mapTables()
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, nil, err
		}
		if mine[n] {
			own = append(own, n)
		} else {
			foreign = append(foreign, n)
		}
	}
	return foreign, own, rows.Err()
}

// SchemaExists reports whether schema exists on the server at addr.
func SchemaExists(ctx context.Context, addr dbutil.Addr, creds dbutil.Creds, schema string) (bool, error) {
	db, err := dbutil.Open(ctx, addr, creds, "")
	if err != nil {
		return false, err
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", schema).Scan(&n); err != nil {
		return false, err
	}
	return n > 0, nil
}

func sharded(m *Map, f Function) []Column {
	var cols []Column
	for _, c := range m.Columns {
		if c.FuncID == f.ID {
			cols = append(cols, c)
		}
	}
	return cols
}

// handoff is a handover whose first look found no rows.
type handoff struct {
	f    Function
	from Mapping
	to   int
	keys keyspace.Filter
}

// handOver finishes a handover: the giving mapping goes offline (writers
// retry rather than write into the keys), a second look proves the part still
// empty, then the new mapping is inserted and the giving one put back online
// in one transaction. A refusal puts the giving mapping back online.
func (s *Store) handOver(ctx context.Context, what string, h *handoff, insert func(tx *sql.Tx) error) error {
	if h.from.Status != Online {
		return badInput("%s: shard %d's mapping %s is offline (an operation on it is running?): try again when it is online", what, h.from.ShardID, h.from)
	}
	ref := h.from.Ref()
	offline := []Change{{Op: OpSetStatus, Ref: ref, Status: Offline}}
	if err := s.Apply(ctx, what+": take the giving mapping offline", offline); err != nil {
		return err
	}
	online := func() error {
		return s.Apply(context.WithoutCancel(ctx), what+": put the giving mapping back online", []Change{{Op: OpSetStatus, Ref: ref, Status: Online}})
	}
	m, err := s.Load(ctx)
	if err == nil {
		err = s.handover(ctx, m, h.f, h.from, h.to, h.keys)
	}
	if err != nil {
		if oerr := online(); oerr != nil {
			return fmt.Errorf("%w; and putting shard %d's mapping %s back online failed (run 'shardctl shardmap set-status --shard %d online'): %v", err, h.from.ShardID, h.from, h.from.ShardID, oerr)
		}
		return err
	}
	changed := false
	err = s.Update(ctx, what, func(tx *sql.Tx, m *Map) (bool, error) {
		if mp, ok := find(m, ref); !ok || mp.ShardID != h.from.ShardID || mp.Status != Offline {
			changed = true
			return false, fmt.Errorf("shard %d's mapping %s changed during the handover; nothing was added", h.from.ShardID, h.from)
		}
		if err := insert(tx); err != nil {
			return false, err
		}
		q, args := Change{Op: OpSetStatus, Ref: ref, Status: Online}.SQL(s.Schema)
		_, err := tx.ExecContext(ctx, q, args...)
		return err == nil, err
	})
	if err != nil && !changed {
		if oerr := online(); oerr != nil {
			return fmt.Errorf("%w; and putting shard %d's mapping %s back online failed: %v", err, h.from.ShardID, h.from, oerr)
		}
	}
	return err
}
