package shardmap

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/keyspace"
)

// schemaDDL creates the sharding database's tables. Table and column names
// follow the book; status and version follow Azure's shard map manager.
var schemaDDL = []string{
	`CREATE TABLE IF NOT EXISTS version (
		id TINYINT NOT NULL PRIMARY KEY,
		version BIGINT NOT NULL,
		format INT NOT NULL
	) ENGINE=InnoDB`,
	`INSERT IGNORE INTO version (id, version, format) VALUES (1, 1, 2)`,
	`CREATE TABLE IF NOT EXISTS locations (
		shard_id INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
		host VARCHAR(255) NOT NULL,
		port INT UNSIGNED NOT NULL DEFAULT 3306,
		schema_name VARCHAR(64) NOT NULL,
		UNIQUE KEY location (host, port, schema_name)
	) ENGINE=InnoDB`,
	`CREATE TABLE IF NOT EXISTS partition_functions (
		func_id INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
		name VARCHAR(64) NOT NULL,
		sharding_type ENUM('RANGE','HASH','LIST') NOT NULL,
		key_type ENUM('INT','STRING') NOT NULL DEFAULT 'INT',
		UNIQUE KEY name (name)
	) ENGINE=InnoDB`,
	`CREATE TABLE IF NOT EXISTS columns (
		table_name VARCHAR(64) NOT NULL PRIMARY KEY,
		column_name VARCHAR(64) NOT NULL,
		func_id INT NOT NULL,
		FOREIGN KEY (func_id) REFERENCES partition_functions (func_id)
	) ENGINE=InnoDB`,
	// Upper bounds are implicit: the next lower bound of the same function, as in the book.
	// INT functions use lower_bound (so the book's lookup query runs as printed), STRING ones lower_bound_str.
	`CREATE TABLE IF NOT EXISTS ranges (
		range_id INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
		func_id INT NOT NULL,
		lower_bound BIGINT NULL,
		lower_bound_str VARBINARY(255) NULL,
		shard_id INT NOT NULL,
		status ENUM('online','offline') NOT NULL DEFAULT 'online',
		UNIQUE KEY lower_int (func_id, lower_bound),
		UNIQUE KEY lower_str (func_id, lower_bound_str),
		FOREIGN KEY (func_id) REFERENCES partition_functions (func_id),
		FOREIGN KEY (shard_id) REFERENCES locations (shard_id)
	) ENGINE=InnoDB`,
	`CREATE TABLE IF NOT EXISTS hashes (
		func_id INT NOT NULL,
		hash CHAR(32) CHARACTER SET ascii NOT NULL,
		shard_id INT NOT NULL,
		status ENUM('online','offline') NOT NULL DEFAULT 'online',
		PRIMARY KEY (func_id, hash),
		FOREIGN KEY (func_id) REFERENCES partition_functions (func_id),
		FOREIGN KEY (shard_id) REFERENCES locations (shard_id)
	) ENGINE=InnoDB`,
	`CREATE TABLE IF NOT EXISTS list_points (
		point_id INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
		func_id INT NOT NULL,
		point BIGINT NULL,
		point_str VARBINARY(255) NULL,
		shard_id INT NOT NULL,
		status ENUM('online','offline') NOT NULL DEFAULT 'online',
		moved_at DATETIME(3) NULL,
		UNIQUE KEY point_int (func_id, point),
		UNIQUE KEY point_str (func_id, point_str),
		FOREIGN KEY (func_id) REFERENCES partition_functions (func_id),
		FOREIGN KEY (shard_id) REFERENCES locations (shard_id)
	) ENGINE=InnoDB`,
	// Who holds an operation lock (the lock itself is GET_LOCK on a pinned connection).
	`CREATE TABLE IF NOT EXISTS locks (
		name VARCHAR(128) NOT NULL PRIMARY KEY,
		holder VARCHAR(255) NOT NULL,
		connection_id BIGINT UNSIGNED NOT NULL,
		acquired_at DATETIME(3) NOT NULL
	) ENGINE=InnoDB`,
	PlansDDL,
	policiesDDL,
}

// policiesDDL is format 2's table of shard policies. A location removed
// takes its policy with it.
const policiesDDL = `CREATE TABLE IF NOT EXISTS shard_policies (
		shard_id INT NOT NULL PRIMARY KEY,
		dedicated BOOL NOT NULL DEFAULT FALSE,
		updated_at DATETIME(3) NOT NULL,
		FOREIGN KEY (shard_id) REFERENCES locations (shard_id) ON DELETE CASCADE
	) ENGINE=InnoDB`

// PlansDDL creates the plans table (package planstore): every plan's
// checksummed document, so any operator host can list, show and resume it.
// A map created before it existed gets it at the first run.
const PlansDDL = `CREATE TABLE IF NOT EXISTS plans (
		id VARCHAR(128) NOT NULL PRIMARY KEY,
		revision BIGINT NOT NULL,
		operation VARCHAR(16) NOT NULL,
		shard_id INT NOT NULL,
		state VARCHAR(16) NOT NULL,
		host VARCHAR(255) NOT NULL,
		updated_at DATETIME(3) NOT NULL,
		document LONGBLOB NOT NULL,
		KEY shard (shard_id)
	) ENGINE=InnoDB`

// Store is the sharding database on one server.
type Store struct {
	DB     *sql.DB
	Schema string
	// Rows looks for rows on a shard; a mapping that would hand a shard's
	// keys to another one is accepted only when it proves there are none.
	Rows RowProbe
	// reads counts the whole map's reads (Load and each Update's locked
	// read): a change is made to the map it validates against, never by
	// reading the map again under the version lock (export_test.go).
	reads atomic.Int64
	// points counts the LIST points those reads returned: a cutover's read
	// follows the points it changes, not the tenants (export_test.go).
	points atomic.Int64
	// cache, when set (Cached), is the map read last.
	cache *mapCache
}

// mapCache is the map a Cached store read last, by version and format.
type mapCache struct {
	mu sync.Mutex
	m  *Map
}

// Cached is a store on the same database whose Load returns a copy of the
// map it read last while the version row is unchanged (every change bumps
// it, as routers rely on): one small read instead of the whole map. For a
// rebalance dry run, which plans many operations against one map of
// perhaps 100,000 points, each plan reading it twice.
func (s *Store) Cached() *Store {
	return &Store{DB: s.DB, Schema: s.Schema, Rows: s.Rows, cache: &mapCache{}}
}

// clone copies m's slices, so a caller that edits its map edits its own.
func (m *Map) clone() *Map {
	c := *m
	c.Locations = append([]Location(nil), m.Locations...)
	c.Functions = append([]Function(nil), m.Functions...)
	c.Columns = append([]Column(nil), m.Columns...)
	c.Mappings = append([]Mapping(nil), m.Mappings...)
	c.Policies = append([]ShardPolicy(nil), m.Policies...)
	return &c
}

// New wraps an open pool whose default database may be anything; every statement names Schema.
func New(db *sql.DB, schema string) *Store { return &Store{DB: db, Schema: schema} }

func (s *Store) t(name string) string { return dbutil.Table(s.Schema, name) }

// Init creates the sharding database idempotently.
func (s *Store) Init(ctx context.Context) error {
	if s.Schema == "" {
		return badInput("the shard map schema name is empty")
	}
	if other, err := s.foreignTables(ctx); err != nil {
		return err
	} else if len(other) > 0 {
		return badInput("schema %s already holds tables that are not the shard map's (%s): it looks like a data schema; give the shard map a schema of its own (--shardmap HOST:PORT/SCHEMA)", s.Schema, strings.Join(other, ", "))
	}
	if _, err := s.DB.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+dbutil.QuoteIdent(s.Schema)); err != nil {
		return fmt.Errorf("shardmap init: create schema %s: %w", s.Schema, err)
	}
	conn, err := s.DB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "USE "+dbutil.QuoteIdent(s.Schema)); err != nil {
		return fmt.Errorf("shardmap init: %w", err)
	}
	for _, stmt := range schemaDDL {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("shardmap init: %w", err)
		}
	}
	return s.Upgrade(ctx) // a map an older shardctl created
}

// Upgrade brings a map of an older format to Format, in place: format 2
// adds the shard_policies table and list_points.moved_at (a nullable
// column: the book's lookup query, routers and older shardctl binaries read
// the table as before). Idempotent, and safe for two hosts at once: each
// step checks what is there. A map that is not initialized is left alone
// (ErrBadInput). Run by every command before it reads the map, so an old
// map upgrades on first use; a map that cannot be upgraded (no ALTER
// privilege) is still read and written, without policies and cool-downs.
func (s *Store) Upgrade(ctx context.Context) error {
	var format int
	if err := s.DB.QueryRowContext(ctx, "SELECT format FROM "+s.t("version")+" WHERE id = 1").Scan(&format); err != nil {
		return s.wrapMissing("read the shard map's format", err)
	}
	if format >= Format {
		return nil
	}
	if _, err := s.DB.ExecContext(ctx, strings.Replace(policiesDDL, "shard_policies", s.t("shard_policies"), 1)); err != nil {
		return fmt.Errorf("upgrade the shard map to format %d: create shard_policies: %w", Format, err)
	}
	var has int
	if err := s.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'list_points' AND COLUMN_NAME = 'moved_at'", s.Schema).Scan(&has); err != nil {
		return fmt.Errorf("upgrade the shard map to format %d: %w", Format, err)
	}
	if has == 0 {
		if _, err := s.DB.ExecContext(ctx, "ALTER TABLE "+s.t("list_points")+" ADD COLUMN moved_at DATETIME(3) NULL"); err != nil && dbutil.ErrNumber(err) != 1060 { // 1060: another host added it
			return fmt.Errorf("upgrade the shard map to format %d: add list_points.moved_at: %w", Format, err)
		}
	}
	if _, err := s.DB.ExecContext(ctx, "UPDATE "+s.t("version")+" SET format = ? WHERE id = 1 AND format < ?", Format, Format); err != nil {
		return fmt.Errorf("upgrade the shard map to format %d: %w", Format, err)
	}
	return nil
}

// Version returns the shard map's version counter.
func (s *Store) Version(ctx context.Context) (int64, error) {
	var v int64
	err := s.DB.QueryRowContext(ctx, "SELECT version FROM "+s.t("version")+" WHERE id = 1").Scan(&v)
	if err != nil {
		return 0, s.wrapMissing("read shard map version", err)
	}
	return v, nil
}

func (s *Store) wrapMissing(what string, err error) error {
	if n := dbutil.ErrNumber(err); n == 1146 || n == 1049 {
		return fmt.Errorf("%w: %s: the shard map in schema %q is not initialized (run 'shardctl shardmap init'): %w", ErrBadInput, what, s.Schema, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Load reads the whole shard map in one consistent read.
func (s *Store) Load(ctx context.Context) (*Map, error) {
	tx, err := s.DB.BeginTx(ctx, &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return nil, fmt.Errorf("load shard map: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	if s.cache == nil {
		return s.load(ctx, tx)
	}
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	if c := s.cache.m; c != nil {
		var v int64
		var f int
		if err := tx.QueryRowContext(ctx, "SELECT version, format FROM "+s.t("version")+" WHERE id = 1").Scan(&v, &f); err != nil {
			return nil, s.wrapMissing("load shard map", err)
		}
		if v == c.Version && f == c.Format {
			return c.clone(), nil
		}
	}
	m, err := s.load(ctx, tx)
	if err != nil {
		return nil, err
	}
	s.cache.m = m.clone()
	return m, nil
}

// LoadFor reads the shard map as Load does, but of its LIST points only
// those the changes cs name: enough to apply cs, or to see which of them
// the map holds (Held), at a cost that follows the changes, not the
// tenants. When cs need the whole map (scopeOf), it is Load.
func (s *Store) LoadFor(ctx context.Context, cs []Change) (*Map, error) {
	sc, ok := scopeOf(cs)
	if !ok {
		return s.Load(ctx)
	}
	tx, err := s.DB.BeginTx(ctx, &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return nil, fmt.Errorf("load shard map: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	return s.loadScoped(ctx, tx, sc)
}

// pointScope is the LIST points a read of the map is limited to, by
// function (nil: every point).
type pointScope map[int][]keyspace.Key

// scopeOf is the LIST points changes cs name; ok is false when one of
// them needs every mapping of the map (removing a location asks whether
// any mapping still points at it).
func scopeOf(cs []Change) (pointScope, bool) {
	sc := pointScope{}
	// Changes name the same points more than once (a status change and a
	// re-point of one set): each is read once, or a point read in two
	// chunks would be two mappings.
	seen := map[int]map[string]bool{}
	for _, c := range cs {
		switch c.Op {
		case OpSetStatus, OpRepoint, OpRemoveMapping, OpMergeRange:
			if c.Ref.Kind != List {
				continue
			}
			if seen[c.Ref.FuncID] == nil {
				seen[c.Ref.FuncID] = map[string]bool{}
			}
			for _, k := range c.Ref.Keys() {
				if s := k.String(); !seen[c.Ref.FuncID][s] {
					seen[c.Ref.FuncID][s] = true
					sc[c.Ref.FuncID] = append(sc[c.Ref.FuncID], k)
				}
			}
		case OpSplitRange, OpAddHashPoint, OpMoveLocation, OpAddLocation, OpSetPolicy: // locations and policies are always read whole
		default:
			return nil, false
		}
	}
	return sc, true
}

// scopeChunk bounds the keys of one read of scoped points (placeholders).
const scopeChunk = 1000

func (s *Store) load(ctx context.Context, q dbutil.Querier) (*Map, error) {
	return s.loadScoped(ctx, q, nil)
}

// loadScoped is load with the LIST points limited to sc (nil: all).
func (s *Store) loadScoped(ctx context.Context, q dbutil.Querier, sc pointScope) (*Map, error) {
	s.reads.Add(1)
	m := &Map{}
	if err := q.QueryRowContext(ctx, "SELECT version, format FROM "+s.t("version")+" WHERE id = 1").Scan(&m.Version, &m.Format); err != nil {
		return nil, s.wrapMissing("load shard map", err)
	}
	if err := scanAll(ctx, q, "SELECT shard_id, host, port, schema_name FROM "+s.t("locations")+" ORDER BY shard_id", func(r *sql.Rows) error {
		var l Location
		err := r.Scan(&l.ShardID, &l.Host, &l.Port, &l.Schema)
		m.Locations = append(m.Locations, l)
		return err
	}); err != nil {
		return nil, err
	}
	if err := scanAll(ctx, q, "SELECT func_id, name, sharding_type, key_type FROM "+s.t("partition_functions")+" ORDER BY func_id", func(r *sql.Rows) error {
		var f Function
		err := r.Scan(&f.ID, &f.Name, &f.Type, &f.KeyType)
		m.Functions = append(m.Functions, f)
		return err
	}); err != nil {
		return nil, err
	}
	if err := scanAll(ctx, q, "SELECT table_name, column_name, func_id FROM "+s.t("columns")+" ORDER BY table_name", func(r *sql.Rows) error {
		var c Column
		err := r.Scan(&c.Table, &c.Column, &c.FuncID)
		m.Columns = append(m.Columns, c)
		return err
	}); err != nil {
		return nil, err
	}
	if err := scanAll(ctx, q, "SELECT func_id, lower_bound, lower_bound_str, shard_id, status FROM "+s.t("ranges"), func(r *sql.Rows) error {
		mp := Mapping{Kind: Range}
		var li sql.NullInt64
		var ls []byte
		if err := r.Scan(&mp.FuncID, &li, &ls, &mp.ShardID, &mp.Status); err != nil {
			return err
		}
		k := keyspace.StrK(string(ls))
		if li.Valid {
			k = keyspace.IntK(li.Int64)
		}
		mp.Lower = &k
		m.Mappings = append(m.Mappings, mp)
		return nil
	}); err != nil {
		return nil, err
	}
	if err := scanAll(ctx, q, "SELECT func_id, hash, shard_id, status FROM "+s.t("hashes"), func(r *sql.Rows) error {
		mp := Mapping{Kind: Hash}
		err := r.Scan(&mp.FuncID, &mp.Hash, &mp.ShardID, &mp.Status)
		m.Mappings = append(m.Mappings, mp)
		return err
	}); err != nil {
		return nil, err
	}
	if err := s.loadPoints(ctx, q, m, sc); err != nil {
		return nil, err
	}
	if err := s.loadPolicies(ctx, q, m); err != nil {
		return nil, err
	}
	m.fillUppers()
	return m, nil
}

// loadPoints reads the LIST points of m, limited to sc (nil: all).
func (s *Store) loadPoints(ctx context.Context, q dbutil.Querier, m *Map, sc pointScope) error {
	// Format 2 keeps when each point last moved, and the shard policies.
	movedCol := ", NULL"
	if m.Format >= 2 {
		movedCol = ", moved_at"
	}
	point := func(r *sql.Rows) error {
		mp := Mapping{Kind: List}
		var pi sql.NullInt64
		var ps, at []byte
		if err := r.Scan(&mp.FuncID, &pi, &ps, &mp.ShardID, &mp.Status, &at); err != nil {
			return err
		}
		k := keyspace.StrK(string(ps))
		if pi.Valid {
			k = keyspace.IntK(pi.Int64)
		}
		mp.Point = &k
		var err error
		if mp.MovedAt, err = movedAt(k, at); err != nil {
			return err
		}
		m.Mappings = append(m.Mappings, mp)
		s.points.Add(1)
		return nil
	}
	points := "SELECT func_id, point, point_str, shard_id, status" + movedCol + " FROM "
	if sc == nil {
		if err := scanAll(ctx, q, points+s.t("list_points"), point); err != nil {
			return err
		}
	}
	for fn, keys := range sc {
		for len(keys) > 0 {
			n := min(len(keys), scopeChunk)
			col := "point"
			args := []any{fn}
			for _, k := range keys[:n] {
				if k.Type == keyspace.StringKey {
					col = "point_str" // a function's keys are of one type
				}
				args = append(args, k.Value())
			}
			query := points + s.t("list_points") + " WHERE func_id = ? AND " + col + " IN (?" + strings.Repeat(", ?", n-1) + ")"
			if err := scanAll(ctx, q, query, point, args...); err != nil {
				return err
			}
			keys = keys[n:]
		}
	}
	return nil
}

// loadPolicies reads the shard policies of a map of format 2.
func (s *Store) loadPolicies(ctx context.Context, q dbutil.Querier, m *Map) error {
	if m.Format < 2 {
		return nil
	}
	return scanAll(ctx, q, "SELECT shard_id, dedicated FROM "+s.t("shard_policies")+" ORDER BY shard_id", func(r *sql.Rows) error {
		var p ShardPolicy
		err := r.Scan(&p.ShardID, &p.Dedicated)
		m.Policies = append(m.Policies, p)
		return err
	})
}

// movedAt is a list point's moved_at as read (nil: never moved).
func movedAt(k keyspace.Key, at []byte) (*time.Time, error) {
	if at == nil {
		return nil, nil
	}
	t, err := time.ParseInLocation("2006-01-02 15:04:05.999999", string(at), time.UTC) // stamped with UTC_TIMESTAMP
	if err != nil {
		return nil, fmt.Errorf("list point %s: moved_at %q: %w", k, at, err)
	}
	return &t, nil
}

func scanAll(ctx context.Context, q dbutil.Querier, query string, fn func(*sql.Rows) error, args ...any) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("load shard map: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return fmt.Errorf("load shard map: %w", err)
		}
	}
	return rows.Err()
}

// Update runs fn in one transaction on a locked, consistent view of the map
// and bumps the version when fn reports a change. Every mutation goes through
// here, so concurrent operators serialize on the version row.
func (s *Store) Update(ctx context.Context, what string, fn func(tx *sql.Tx, m *Map) (changed bool, err error)) error {
	return s.update(ctx, what, nil, fn)
}

// update is Update on a view whose LIST points are limited to sc (nil: all).
func (s *Store) update(ctx context.Context, what string, sc pointScope, fn func(tx *sql.Tx, m *Map) (changed bool, err error)) error {
	err := dbutil.InTx(ctx, s.DB, func(tx *sql.Tx) error {
		var v int64
		if err := tx.QueryRowContext(ctx, "SELECT version FROM "+s.t("version")+" WHERE id = 1 FOR UPDATE").Scan(&v); err != nil {
			return s.wrapMissing("lock the shard map version", err)
		}
		m, err := s.loadScoped(ctx, tx, sc)
		if err != nil {
			return err
		}
		changed, err := fn(tx, m)
		if err != nil || !changed {
			return err
		}
		_, err = tx.ExecContext(ctx, "UPDATE "+s.t("version")+" SET version = version + 1 WHERE id = 1")
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func find(m *Map, ref Ref) (Mapping, bool) {
	for _, mp := range m.Mappings {
		if mp.FuncID != ref.FuncID || mp.Kind != ref.Kind {
			continue
		}
		switch ref.Kind {
		case Range:
			if mp.Lower.Compare(*ref.Lower) == 0 {
				return mp, true
			}
		case Hash:
			if mp.Hash == ref.Hash {
				return mp, true
			}
		case List:
			if mp.Point.Compare(*ref.Point) == 0 {
				return mp, true
			}
		}
	}
	return Mapping{}, false
}
