package shardmap

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/keyspace"
)

// AddShard registers a location and returns its shard id. Registering the
// same host, port and schema again returns the existing id.
func (s *Store) AddShard(ctx context.Context, host string, port int, schema string) (int, error) {
	// The limit is in characters (the column is VARCHAR(64)), as the flag
	// rule counts it: a name it let through must not be refused here, after
	// a split's plan registered its location.
	if host == "" || port <= 0 || port > 65535 || schema == "" || utf8.RuneCountInString(schema) > dbutil.MaxIdentLen {
		return 0, badInput("a shard needs a host, a port from 1 to 65535 and a schema name of at most 64 characters")
	}
	var id int
	err := s.Update(ctx, "add shard", func(tx *sql.Tx, m *Map) (bool, error) {
		for _, l := range m.Locations {
			if l.Host == host && l.Port == port && l.Schema == schema {
				id = l.ShardID
				return false, nil
			}
		}
		res, err := tx.ExecContext(ctx, "INSERT INTO "+s.t("locations")+" (host, port, schema_name) VALUES (?, ?, ?)", host, port, schema)
		if err != nil {
			return false, err
		}
		n, err := res.LastInsertId()
		id = int(n)
		return true, err
	})
	return id, err
}

// AddFunction registers a partition function; the same definition again is a no-op.
func (s *Store) AddFunction(ctx context.Context, name string, typ ShardingType, kt keyspace.KeyType) (int, error) {
	typ = ShardingType(strings.ToUpper(string(typ)))
	if name == "" || len(name) > 64 {
		return 0, badInput("a partition function needs a name of 1 to 64 characters")
	}
	if typ != Range && typ != Hash && typ != List {
		return 0, badInput("sharding type %q: use RANGE, HASH or LIST", typ)
	}
	if kt != keyspace.IntKey && kt != keyspace.StringKey {
		return 0, badInput("key type %q: use INT or STRING", kt)
	}
	var id int
	err := s.Update(ctx, "add function", func(tx *sql.Tx, m *Map) (bool, error) {
		for _, f := range m.Functions {
			if f.Name == name {
				if f.Type != typ || f.KeyType != kt {
					return false, badInput("partition function %q exists as %s/%s", name, f.Type, f.KeyType)
				}
				id = f.ID
				return false, nil
			}
		}
		res, err := tx.ExecContext(ctx, "INSERT INTO "+s.t("partition_functions")+" (name, sharding_type, key_type) VALUES (?, ?, ?)", name, string(typ), string(kt))
		if err != nil {
			return false, err
		}
		n, err := res.LastInsertId()
		id = int(n)
		return true, err
	})
	return id, err
}

// AddColumn records that table is sharded on column by function fn.
func (s *Store) AddColumn(ctx context.Context, table, column, fn string) error {
	if table == "" || column == "" {
		return badInput("a sharded column needs a table and a column name")
	}
	return s.Update(ctx, "add column", func(tx *sql.Tx, m *Map) (bool, error) {
		f, err := m.Function(fn)
		if err != nil {
			return false, err
		}
		for _, c := range m.Columns {
			if c.Table == table {
				if c.Column == column && c.FuncID == f.ID {
					return false, nil
				}
				return false, badInput("table %q is already sharded on %q by function %d", table, c.Column, c.FuncID)
			}
		}
		_, err = tx.ExecContext(ctx, "INSERT INTO "+s.t("columns")+" (table_name, column_name, func_id) VALUES (?, ?, ?)", table, column, f.ID)
		return err == nil, err
	})
}

// AddRange adds a range mapping starting at lower (its upper bound is the next
// lower bound). A bound inside an existing range would hand part of another
// shard's keys over without moving its rows, so only bounds below the first
// or above the last are accepted; use split for the rest.
func (s *Store) AddRange(ctx context.Context, fn, lower string, shardID int) error {
	var ho *handoff
	var insert func(tx *sql.Tx) error
	err := s.Update(ctx, "add range", func(tx *sql.Tx, m *Map) (bool, error) {
		f, err := mappable(m, fn, Range, shardID)
		if err != nil {
			return false, err
		}
		k, err := keyspace.ParseKey(lower, f.KeyType)
		if err != nil {
			return false, badInput("%v", err)
		}
		ms := m.MappingsOf(f.ID)
		for _, mp := range ms {
			if mp.Lower.Compare(k) == 0 {
				if mp.ShardID == shardID {
					return false, nil // the same range again: idempotent
				}
				return false, badInput("a range of function %s already starts at %s (shard %d)", f.Name, k, mp.ShardID)
			}
		}
		if len(ms) > 0 && k.Compare(*ms[0].Lower) > 0 && k.Compare(*ms[len(ms)-1].Lower) < 0 {
			for _, mp := range ms {
				if (keyspace.Range{Lo: mp.Lower, Hi: mp.Upper}).Contains(k) {
					return false, badInput("lower bound %s overlaps range %s of shard %d: use 'shardctl split' to move part of a shard's range", k, mp, mp.ShardID)
				}
			}
		}
		if last := len(ms) - 1; last >= 0 && k.Compare(*ms[last].Lower) > 0 {
			// Inside the open-ended last range: [k, +inf) changes hands.
			keys := keyspace.Filter{Column: "key", Ranges: []keyspace.Range{{Lo: &k}}}
			if err := s.handover(ctx, m, f, ms[last], shardID, keys); err != nil {
				return false, err
			}
			if ms[last].ShardID != shardID && len(sharded(m, f)) > 0 {
				ho = &handoff{f: f, from: ms[last], to: shardID, keys: keys}
				insert = func(tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, insertRangeSQL(s, f.KeyType), f.ID, k.Value(), shardID, Online)
					return err
				}
				return false, nil // the map changes only after a second look behind an offline mapping
			}
		}
		_, err = tx.ExecContext(ctx, insertRangeSQL(s, f.KeyType), f.ID, k.Value(), shardID, Online)
		return err == nil, err
	})
	if err != nil || ho == nil {
		return err
	}
	return s.handOver(ctx, "add range", ho, insert)
}

func insertRangeSQL(s *Store, kt keyspace.KeyType) string {
	col := "lower_bound"
	if kt == keyspace.StringKey {
		col = "lower_bound_str"
	}
	return "INSERT INTO " + s.t("ranges") + " (func_id, " + col + ", shard_id, status) VALUES (?, ?, ?, ?)"
}

// AddHashPoint adds a ring point for shard shardID. hash is a 32-digit hex MD5.
func (s *Store) AddHashPoint(ctx context.Context, fn, hash string, shardID int) error {
	hash = strings.ToLower(hash)
	if !keyspace.ValidHash(hash) {
		return badInput("hash point %q is not a 32-digit hex MD5 (use --name to hash a string)", hash)
	}
	var ho *handoff
	var insert func(tx *sql.Tx) error
	err := s.Update(ctx, "add hash point", func(tx *sql.Tx, m *Map) (bool, error) {
		f, err := mappable(m, fn, Hash, shardID)
		if err != nil {
			return false, err
		}
		if mp, ok := find(m, Ref{FuncID: f.ID, Kind: Hash, Hash: hash}); ok {
			if mp.ShardID == shardID {
				return false, nil
			}
			return false, badInput("hash point %s of function %s already belongs to shard %d", hash, f.Name, mp.ShardID)
		}
		ins := func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO "+s.t("hashes")+" (func_id, hash, shard_id, status) VALUES (?, ?, ?, ?)", f.ID, hash, shardID, Online)
			return err
		}
		if from, arc, ok := ringGiver(m.MappingsOf(f.ID), hash); ok {
			keys := keyspace.Filter{Column: "key", Arcs: []keyspace.Arc{arc}}
			if err := s.handover(ctx, m, f, from, shardID, keys); err != nil {
				return false, err
			}
			if from.ShardID != shardID && len(sharded(m, f)) > 0 {
				ho, insert = &handoff{f: f, from: from, to: shardID, keys: keys}, ins
				return false, nil
			}
		}
		err = ins(tx)
		return err == nil, err
	})
	if err != nil || ho == nil {
		return err
	}
	return s.handOver(ctx, "add hash point", ho, insert)
}

// AddPoint maps one LIST key to shard shardID.
func (s *Store) AddPoint(ctx context.Context, fn, key string, shardID int) error {
	return s.AddPoints(ctx, fn, []string{key}, shardID)
}

// AddPoints maps LIST keys to shard shardID in one transaction (a fleet of
// tenants is registered at once). A key mapped there already is a re-run.
func (s *Store) AddPoints(ctx context.Context, fn string, keys []string, shardID int) error {
	return s.Update(ctx, "add list point", func(tx *sql.Tx, m *Map) (bool, error) {
		f, err := mappable(m, fn, List, shardID)
		if err != nil {
			return false, err
		}
		have := map[keyspace.Key]int{} // a fleet's points, looked up once each
		for _, mp := range m.Mappings {
			if mp.FuncID == f.ID && mp.Kind == List && mp.Point != nil {
				have[*mp.Point] = mp.ShardID
			}
		}
		var add []PointLine
		for _, key := range keys {
			k, err := keyspace.ParseKey(key, f.KeyType)
			if err != nil {
				return false, badInput("%v", err)
			}
			if owner, ok := have[k]; ok {
				if owner == shardID {
					continue
				}
				return false, badInput("key %s of function %s already maps to shard %d", k, f.Name, owner)
			}
			have[k] = shardID
			add = append(add, PointLine{Line: len(add) + 1, Key: k.String(), Shard: shardID})
		}
		changed := len(add) > 0
		if err := s.insertPoints(ctx, tx, f, add); err != nil {
			return false, err
		}
		return changed, nil
	})
}

// Apply makes every change in one transaction and bumps the version once.
// Each change is idempotent, so a resumed operation can apply a list again.
func (s *Store) Apply(ctx context.Context, what string, changes []Change) error {
	return s.ApplyWith(ctx, what, changes, nil)
}

// ApplyWith applies changes like Apply and runs also in the same
// transaction once they are in (a plan's record that must change with the
// map, or not at all).
//
// The changes are checked against a view of the map that holds, of its
// LIST points, only those they name (scopeOf): a cutover that re-points
// three tenants reads three points inside the blackout, not the 100,000 the
// shards own.
func (s *Store) ApplyWith(ctx context.Context, what string, changes []Change, also func(*sql.Tx) error) error {
	sc, _ := scopeOf(changes) // nil (every point) when they need the whole map
	return s.update(ctx, what, sc, func(tx *sql.Tx, m *Map) (bool, error) {
		changed := false
		for _, c := range changes {
			did, err := s.applyOne(ctx, tx, m, c)
			if err != nil {
				return false, fmt.Errorf("%s: %w", c.Describe(), err)
			}
			changed = changed || did
		}
		if also != nil { // committed with the changes, or alone when the map had them already
			if err := also(tx); err != nil {
				return false, err
			}
		}
		return changed, nil
	})
}

func (s *Store) applyOne(ctx context.Context, tx *sql.Tx, m *Map, c Change) (bool, error) {
	if pending, err := m.pending(c); err != nil || !pending {
		return false, err
	}
	if len(c.Ref.Points) > 0 {
		return s.applyPoints(ctx, tx, m, c)
	}
	q, args := c.SQLFormat(s.Schema, m.Format)
	res, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return false, err
	}
	// Later changes validate against the map as it is now: the change is
	// made to m too, rather than the whole map read again while the version
	// row is locked (every writer of the shard map waits on that lock, and
	// at a thousand shards one read is thousands of rows).
	return true, s.applyToMap(ctx, tx, m, c, res)
}

// Holds reports whether m has every change of cs already: applying them
// would change nothing (a switch that committed though its sender never
// heard so).
func (m *Map) Holds(cs []Change) bool {
	for _, c := range cs {
		if pending, err := m.pending(c); err != nil || pending {
			return false
		}
	}
	return true
}

// pending reports whether change c would change m (false: a re-run), or
// why it cannot be made.
func (m *Map) pending(c Change) (bool, error) {
	if len(c.Ref.Points) > 0 {
		return m.pendingPoints(c)
	}
	switch c.Op {
	case OpSetStatus, OpRepoint, OpRemoveMapping, OpMergeRange:
		mp, ok := find(m, c.Ref)
		if !ok {
			if c.Op == OpRemoveMapping || c.Op == OpMergeRange {
				return false, nil // already gone: a re-run
			}
			return false, fmt.Errorf("%w: mapping %+v", ErrNotFound, c.Ref)
		}
		if c.Op == OpSetStatus && mp.Status == c.Status || c.Op == OpRepoint && mp.ShardID == c.ShardID {
			return false, nil
		}
		if c.Op == OpRepoint {
			if _, err := m.Location(c.ShardID); err != nil {
				return false, err
			}
		}
		if c.Op == OpMergeRange {
			prev, ok := previousRange(m, mp)
			if !ok || prev.ShardID != mp.ShardID {
				return false, badInput("range %s can only merge into the range below it when both belong to the same shard", mp)
			}
		}
	case OpSplitRange:
		if _, ok := find(m, Ref{FuncID: c.Ref.FuncID, Kind: Range, Lower: c.At}); ok {
			return false, nil
		}
	case OpAddHashPoint:
		if mp, ok := find(m, c.Ref); ok {
			if mp.ShardID == c.ShardID {
				return false, nil
			}
			return false, badInput("hash point %s already belongs to shard %d", c.Ref.Hash, mp.ShardID)
		}
	case OpMoveLocation:
		l, err := m.Location(c.ShardID)
		if err != nil {
			return false, err
		}
		if l.Host == c.Host && l.Port == c.Port {
			return false, nil
		}
	case OpAddLocation:
		// Registering the same location again is a re-run (AddShard returns its id).
		for _, l := range m.Locations {
			if l.Host == c.Host && l.Port == c.Port && l.Schema == c.Schema {
				return false, nil
			}
		}
	case OpSetPolicy:
		if _, err := m.Location(c.ShardID); err != nil {
			return false, err
		}
		if m.Format < 2 {
			return false, nil // a map that could not be upgraded keeps no policies (Upgrade)
		}
		if m.Dedicated(c.ShardID) == (c.Policy == PolicyDedicated) {
			return false, nil
		}
	case OpRemoveLocation:
		if _, err := m.Location(c.ShardID); err != nil {
			return false, nil
		}
		if ms := m.ShardMappings(c.ShardID); len(ms) > 0 {
			return false, badInput("shard %d still has %d mappings", c.ShardID, len(ms))
		}
	default:
		return false, fmt.Errorf("unknown shard map change %q", c.Op)
	}
	return true, nil
}

// pendingPoints is pending for a set of LIST points: a re-run when every
// point is as asked already.
func (m *Map) pendingPoints(c Change) (bool, error) {
	if c.Op != OpSetStatus && c.Op != OpRepoint {
		return false, fmt.Errorf("shard map change %q takes one mapping, not a set of list points", c.Op)
	}
	if c.Op == OpRepoint {
		if _, err := m.Location(c.ShardID); err != nil {
			return false, err
		}
	}
	hit, err := m.points(c)
	if err != nil {
		return false, err
	}
	for _, mp := range hit {
		if !(c.Op == OpSetStatus && mp.Status == c.Status || c.Op == OpRepoint && mp.ShardID == c.ShardID) {
			return true, nil
		}
	}
	return false, nil
}

// points returns the mappings of c's LIST points, all of them or ErrNotFound.
func (m *Map) points(c Change) ([]*Mapping, error) {
	want := map[string]bool{}
	for _, k := range c.Ref.Points {
		want[k.String()] = true
	}
	var hit []*Mapping
	for i := range m.Mappings {
		mp := &m.Mappings[i]
		if mp.FuncID != c.Ref.FuncID || mp.Kind != List || mp.Point == nil || !want[mp.Point.String()] {
			continue
		}
		hit = append(hit, mp)
	}
	if len(hit) != len(want) {
		return nil, fmt.Errorf("%w: %d of the %d list points of function %d", ErrNotFound, len(want)-len(hit), len(want), c.Ref.FuncID)
	}
	return hit, nil
}

// applyPoints sets the status of, or re-points, a set of LIST points in one
// statement (pending said it changes something).
func (s *Store) applyPoints(ctx context.Context, tx *sql.Tx, m *Map, c Change) (bool, error) {
	hit, err := m.points(c)
	if err != nil {
		return false, err
	}
	q, args := c.SQLFormat(s.Schema, m.Format)
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return false, err
	}
	now := time.Now().UTC()
	for _, mp := range hit {
		if c.Op == OpSetStatus {
			mp.Status = c.Status
		} else {
			mp.ShardID, mp.MovedAt = c.ShardID, &now
		}
	}
	return true, nil
}

// applyToMap makes change c, just executed in tx with result res, to m.
func (s *Store) applyToMap(ctx context.Context, tx *sql.Tx, m *Map, c Change, res sql.Result) error {
	switch c.Op {
	case OpSetStatus, OpRepoint, OpRemoveMapping, OpMergeRange:
		for i := range m.Mappings {
			mp := &m.Mappings[i]
			if mp.FuncID != c.Ref.FuncID || mp.Kind != c.Ref.Kind || !sameKey(*mp, c.Ref) {
				continue
			}
			switch c.Op {
			case OpSetStatus:
				mp.Status = c.Status
			case OpRepoint:
				mp.ShardID = c.ShardID
			default:
				m.Mappings = append(m.Mappings[:i:i], m.Mappings[i+1:]...)
				m.fillUppers()
			}
			return nil
		}
	case OpSplitRange:
		// The new range took the shard and status of the range below it,
		// chosen by the server's ordering: read them back rather than guess.
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		col, val := "lower_bound", any(c.At.Int)
		if c.At.Type == keyspace.StringKey {
			col, val = "lower_bound_str", c.At.Str
		}
		mp := Mapping{FuncID: c.Ref.FuncID, Kind: Range, Lower: c.At}
		if err := tx.QueryRowContext(ctx, "SELECT shard_id, status FROM "+s.t("ranges")+" WHERE func_id = ? AND "+col+" = ?", c.Ref.FuncID, val).Scan(&mp.ShardID, &mp.Status); err != nil {
			return fmt.Errorf("read back the range of function %d from %s: %w", c.Ref.FuncID, c.At, err)
		}
		m.Mappings = append(m.Mappings, mp)
		m.fillUppers()
	case OpAddHashPoint:
		m.Mappings = append(m.Mappings, Mapping{FuncID: c.Ref.FuncID, Kind: Hash, Hash: c.Ref.Hash, ShardID: c.ShardID, Status: c.Status})
		m.fillUppers()
	case OpMoveLocation:
		for i := range m.Locations {
			if m.Locations[i].ShardID == c.ShardID {
				m.Locations[i].Host, m.Locations[i].Port = c.Host, c.Port
			}
		}
	case OpRemoveLocation:
		for i, l := range m.Locations {
			if l.ShardID == c.ShardID {
				m.Locations = append(m.Locations[:i:i], m.Locations[i+1:]...)
				break
			}
		}
		m.setPolicy(c.ShardID, false) // the foreign key's cascade
	case OpSetPolicy:
		m.setPolicy(c.ShardID, c.Policy == PolicyDedicated)
	case OpAddLocation:
		id, err := res.LastInsertId()
		if err != nil {
			return fmt.Errorf("the id of the new shard on %s:%d, schema %s: %w", c.Host, c.Port, c.Schema, err)
		}
		m.Locations = append(m.Locations, Location{ShardID: int(id), Host: c.Host, Port: c.Port, Schema: c.Schema})
		sort.Slice(m.Locations, func(i, j int) bool { return m.Locations[i].ShardID < m.Locations[j].ShardID })
	}
	return nil
}

// sameKey reports whether mp is the mapping ref names (its function and kind aside).
func sameKey(mp Mapping, ref Ref) bool {
	switch ref.Kind {
	case Range:
		return mp.Lower != nil && ref.Lower != nil && mp.Lower.Compare(*ref.Lower) == 0
	case Hash:
		return mp.Hash == ref.Hash
	}
	return mp.Point != nil && ref.Point != nil && mp.Point.Compare(*ref.Point) == 0
}

func previousRange(m *Map, mp Mapping) (Mapping, bool) {
	var prev Mapping
	found := false
	for _, o := range m.MappingsOf(mp.FuncID) {
		if o.Lower.Compare(*mp.Lower) >= 0 {
			break
		}
		prev, found = o, true
	}
	return prev, found
}

// mappable finds function fn, checks it is of type typ, and checks that
// shard id exists: what every added mapping needs.
func mappable(m *Map, fn string, typ ShardingType, shardID int) (Function, error) {
	f, err := m.Function(fn)
	if err != nil {
		return f, err
	}
	if f.Type != typ {
		return f, badInput("function %s is %s, not %s", f.Name, f.Type, typ)
	}
	if _, err := m.Location(shardID); err != nil {
		return f, badInput("unknown shard %d: add it first with 'shardctl shardmap add-shard'", shardID)
	}
	return f, nil
}
