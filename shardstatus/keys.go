package shardstatus

// Per-key (tenant) row counts: 'status --keys' and '--top', and the tenants
// rebalance weighs on a LIST map. Counting reads indexes, never whole
// tables at once: a key is one index range read per sharded table, and a
// shard's keys are counted by a GROUP BY over the shard column in chunks of
// keys (keyset on the column), each statement short.

import (
	"container/heap"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/pipeline"
	"github.com/shardctl/shardctl/shardmap"
)

// KeyRows is one key's rows over its function's sharded tables, and where
// the key lives.
type KeyRows struct {
	Function string `json:"function"`
	Key      string `json:"key"`
	ShardID  int    `json:"shard_id"`
	Server   string `json:"server"`
	Schema   string `json:"schema"`
	Status   string `json:"status"` // its mapping's
	Rows     int64  `json:"rows"`
}

// groupsPerRead is how many keys one GROUP BY statement counts (a variable
// for the tests, which read in smaller chunks). A statement streams its
// groups in index order, holding no lock; at 1,000 keys a 100,000-tenant
// shard was 100 statements a table, and on a loaded server their round trips
// were most of a rebalance dry run. Up to 50,000 tenants a shard is now one
// statement a table.
var groupsPerRead = 50000

// tablesOf are the tables sharded by function f, with their shard column.
func tablesOf(m *shardmap.Map, f shardmap.Function) []shardmap.Column {
	var out []shardmap.Column
	for _, c := range m.Columns {
		if c.FuncID == f.ID {
			out = append(out, c)
		}
	}
	return out
}

// pools opens one connection pool per server, on demand (the pipeline's).
func pools(creds dbutil.Creds) *pipeline.Pools {
	return pipeline.WithPools(pipeline.Env{Creds: creds}).Pools
}

// Keys counts the rows of each of keys (function f, of any type): where the
// shard map routes it, one index range read per sharded table.
func Keys(ctx context.Context, m *shardmap.Map, f shardmap.Function, keys []string, creds dbutil.Creds) ([]KeyRows, error) {
	ps := pools(creds)
	defer ps.Close()
	tables := tablesOf(m, f)
	out := make([]KeyRows, 0, len(keys))
	for _, key := range keys {
		res, err := m.Lookup(f, key)
		if errors.Is(err, shardmap.ErrNoMapping) {
			return nil, fmt.Errorf("%w: key %s: no shard holds it (function %s has no mapping for it; see 'shardctl shardmap show')", shardmap.ErrBadInput, key, f.Name)
		}
		if err != nil {
			return nil, err
		}
		k, err := keyspace.ParseKey(key, f.KeyType)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", shardmap.ErrBadInput, err)
		}
		loc := res.Location
		kr := KeyRows{Function: f.Name, Key: k.String(), ShardID: loc.ShardID, Server: loc.Addr().String(), Schema: loc.Schema, Status: res.Mapping.Status}
		db, err := ps.DB(ctx, loc.Addr())
		if err != nil {
			return nil, fmt.Errorf("shard %d on %s: %w", loc.ShardID, loc.Addr(), err)
		}
		for _, t := range tables {
			var n int64
			q := "SELECT COUNT(*) FROM " + dbutil.Table(loc.Schema, t.Table) + " WHERE " + dbutil.QuoteIdent(t.Column) + " = ?"
			if err := db.QueryRowContext(ctx, q, k.Value()).Scan(&n); err != nil {
				return nil, fmt.Errorf("count key %s of shard %d, table %s.%s: %w", k, loc.ShardID, loc.Schema, t.Table, err)
			}
			kr.Rows += n
		}
		out = append(out, kr)
	}
	return out, nil
}

// Weight is a key's (tenant's) rows over its function's sharded tables,
// and the bytes they take: each table's rows of the key times that table's
// average row (data and indexes, from table statistics), an estimate that
// costs no read of the rows.
type Weight struct {
	Rows  int64 `json:"rows"`
	Bytes int64 `json:"bytes"`
}

// ShardKeys counts the rows of every key that the shard at loc owns among
// points (its list points of LIST function f), summed over f's sharded
// tables; keys without rows are left out (ShardWeights).
func ShardKeys(ctx context.Context, db *sql.DB, m *shardmap.Map, f shardmap.Function, loc shardmap.Location, points []shardmap.Mapping) (map[string]int64, error) {
	ws, err := ShardWeights(ctx, db, m, f, loc, points)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(ws))
	for k, w := range ws {
		out[k] = w.Rows
	}
	return out, nil
}

// ShardWeights weighs every key that the shard at loc owns among points by
// rows and bytes. Each table is read by GROUP BY over its shard column in
// chunks of groupsPerRead keys, in key order through an index that leads
// with the column; a table without one is read by one GROUP BY (a single
// scan, rather than a scan per chunk). Rows of keys the shard does not own
// (left for a prune) are not counted. The tables' average row sizes are
// one statistics query.
func ShardWeights(ctx context.Context, db *sql.DB, m *shardmap.Map, f shardmap.Function, loc shardmap.Location, points []shardmap.Mapping) (map[string]Weight, error) {
	owned := make(map[string]bool, len(points))
	for _, mp := range points {
		if mp.Point != nil {
			owned[mp.Point.String()] = true
		}
	}
	out := map[string]Weight{}
	if len(owned) == 0 {
		return out, nil
	}
	avg, err := avgRowBytes(ctx, db, loc.Schema)
	if err != nil {
		return nil, fmt.Errorf("the table statistics of shard %d (%s): %w", loc.ShardID, loc.Schema, err)
	}
	for _, t := range tablesOf(m, f) {
		per := avg[t.Table]
		if err := groupCount(ctx, db, f, loc.Schema, t, func(key string, n int64) {
			if owned[key] {
				w := out[key]
				w.Rows += n
				w.Bytes += int64(float64(n) * per)
				out[key] = w
			}
		}); err != nil {
			return nil, fmt.Errorf("count the keys of shard %d, table %s.%s: %w", loc.ShardID, loc.Schema, t.Table, err)
		}
	}
	return out, nil
}

// avgRowBytes is each table's data and index bytes per row in schema (table
// statistics; 0 for a table they count no rows of).
func avgRowBytes(ctx context.Context, db *sql.DB, schema string) (map[string]float64, error) {
	rows, err := db.QueryContext(ctx, "SELECT TABLE_NAME, COALESCE(TABLE_ROWS, 0), COALESCE(DATA_LENGTH, 0) + COALESCE(INDEX_LENGTH, 0) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?", schema)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]float64{}
	for rows.Next() {
		var name string
		var n, b int64
		if err := rows.Scan(&name, &n, &b); err != nil {
			return nil, err
		}
		if n > 0 {
			out[name] = float64(b) / float64(n)
		}
	}
	return out, rows.Err()
}

// groupCount reads one table's rows per key.
func groupCount(ctx context.Context, db *sql.DB, f shardmap.Function, schema string, t shardmap.Column, yield func(string, int64)) error {
	col, table := dbutil.QuoteIdent(t.Column), dbutil.Table(schema, t.Table)
	var indexed int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND COLUMN_NAME = ? AND SEQ_IN_INDEX = 1",
		schema, t.Table, t.Column).Scan(&indexed); err != nil {
		return err
	}
	if indexed == 0 {
		_, _, err := readGroups(ctx, db, "SELECT "+col+", COUNT(*) FROM "+table+" WHERE "+col+" IS NOT NULL GROUP BY "+col, nil, yield)
		return err
	}
	var after any
	for {
		q, args := "SELECT "+col+", COUNT(*) FROM "+table+" WHERE "+col+" IS NOT NULL", []any(nil)
		if after != nil {
			q, args = q+" AND "+col+" > ?", []any{after}
		}
		q += fmt.Sprintf(" GROUP BY %s ORDER BY %s LIMIT %d", col, col, groupsPerRead)
		last, got, err := readGroups(ctx, db, q, args, yield)
		if err != nil || got < groupsPerRead {
			return err
		}
		k, err := keyspace.ParseKey(last, f.KeyType)
		if err != nil {
			return fmt.Errorf("key %q: %w", last, err)
		}
		after = k.Value()
	}
}

// readGroups yields each (key, rows) of a GROUP BY, and returns the last
// key and how many it read.
func readGroups(ctx context.Context, db *sql.DB, q string, args []any, yield func(string, int64)) (last string, got int, err error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return "", 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var n int64
		if err := rows.Scan(&last, &n); err != nil {
			return "", 0, err
		}
		yield(last, n)
		got++
	}
	return last, got, rows.Err()
}

// EachShardKeys counts the keys of every LIST shard in locs (each shard
// whose mappings are all points of one LIST function), several servers at
// once, and hands each shard's counts to fn (called from one goroutine at a
// time). The map's mappings are grouped by shard once, not once per shard.
func EachShardKeys(ctx context.Context, m *shardmap.Map, locs []shardmap.Location, creds dbutil.Creds, fn func(shardmap.Function, shardmap.Location, map[string]Weight)) error {
	ps := pools(creds)
	defer ps.Close()
	mappings := map[int][]shardmap.Mapping{}
	for _, mp := range m.Mappings {
		mappings[mp.ShardID] = append(mappings[mp.ShardID], mp)
	}
	type shard struct {
		f   shardmap.Function
		loc shardmap.Location
	}
	byServer := map[dbutil.Addr][]shard{}
	var servers []dbutil.Addr
	for _, l := range locs {
		f, ok := ListFunction(m, mappings[l.ShardID])
		if !ok {
			continue
		}
		if _, ok := byServer[l.Addr()]; !ok {
			servers = append(servers, l.Addr())
		}
		byServer[l.Addr()] = append(byServer[l.Addr()], shard{f, l})
	}
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, serversAtOnce)
	var wg sync.WaitGroup
	for _, addr := range servers {
		wg.Add(1)
		sem <- struct{}{}
		go func(addr dbutil.Addr) {
			defer func() { <-sem; wg.Done() }()
			err := func() error {
				db, err := ps.DB(ctx, addr)
				if err != nil {
					return fmt.Errorf("server %s: %w", addr, err)
				}
				for _, sh := range byServer[addr] {
					keys, err := ShardWeights(ctx, db, m, sh.f, sh.loc, mappings[sh.loc.ShardID])
					if err != nil {
						return err
					}
					mu.Lock()
					fn(sh.f, sh.loc, keys)
					mu.Unlock()
				}
				return nil
			}()
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}(addr)
	}
	wg.Wait()
	return firstErr
}

// ListFunction is the LIST function of a shard whose mappings mps are all
// points of one LIST function.
func ListFunction(m *shardmap.Map, mps []shardmap.Mapping) (shardmap.Function, bool) {
	if len(mps) == 0 {
		return shardmap.Function{}, false
	}
	for _, mp := range mps {
		if mp.Kind != shardmap.List || mp.FuncID != mps[0].FuncID {
			return shardmap.Function{}, false
		}
	}
	f, err := m.FunctionByID(mps[0].FuncID)
	return f, err == nil
}

// Top is, for each LIST function of the map, its n keys with the most rows
// over the fleet, heaviest first (ties by key). It keeps n keys per function
// in memory, not the fleet's.
func Top(ctx context.Context, m *shardmap.Map, n int, creds dbutil.Creds) ([]KeyRows, error) {
	status := map[int]map[string]string{} // function: key: its mapping's status
	tops := map[string]*topN{}
	err := EachShardKeys(ctx, m, m.Locations, creds, func(f shardmap.Function, l shardmap.Location, keys map[string]Weight) {
		st := status[f.ID]
		if st == nil {
			st = map[string]string{}
			for _, mp := range m.Mappings {
				if mp.FuncID == f.ID && mp.Point != nil {
					st[mp.Point.String()] = mp.Status
				}
			}
			status[f.ID] = st
		}
		t := tops[f.Name]
		if t == nil {
			t = &topN{n: n}
			tops[f.Name] = t
		}
		for k, w := range keys {
			t.add(KeyRows{Function: f.Name, Key: k, ShardID: l.ShardID, Server: l.Addr().String(), Schema: l.Schema, Status: st[k], Rows: w.Rows})
		}
	})
	if err != nil {
		return nil, err
	}
	var out []KeyRows
	names := make([]string, 0, len(tops))
	for name := range tops {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		ks := tops[name].items
		sort.Slice(ks, func(i, j int) bool { return heavier(ks[i], ks[j]) })
		out = append(out, ks...)
	}
	return out, nil
}

func heavier(a, b KeyRows) bool {
	if a.Rows != b.Rows {
		return a.Rows > b.Rows
	}
	return a.Key < b.Key
}

// topN keeps the n heaviest keys: a min-heap on rows.
type topN struct {
	n     int
	items []KeyRows
}

func (t *topN) Len() int           { return len(t.items) }
func (t *topN) Less(i, j int) bool { return heavier(t.items[j], t.items[i]) }
func (t *topN) Swap(i, j int)      { t.items[i], t.items[j] = t.items[j], t.items[i] }
func (t *topN) Push(x any)         { t.items = append(t.items, x.(KeyRows)) }
func (t *topN) Pop() any {
	x := t.items[len(t.items)-1]
	t.items = t.items[:len(t.items)-1]
	return x
}

func (t *topN) add(k KeyRows) {
	switch {
	case len(t.items) < t.n:
		heap.Push(t, k)
	case heavier(k, t.items[0]):
		t.items[0] = k
		heap.Fix(t, 0)
	}
}
