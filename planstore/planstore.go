// Package planstore keeps a copy of every plan in the sharding database, so
// that any operator host that reaches the sharding database can list, show,
// resume or abort it. The copy is the plan file's own checksummed document
// (plans hold addresses, never credentials). It is written after the file, only
// by a process that holds the shard's lock, and never over a higher revision:
// of the two copies, the one with the higher revision is the later.
package planstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/fault"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
)

// Store is the plans table of one sharding database.
type Store struct {
	DB     *sql.DB
	Schema string
}

// New wraps the sharding database's pool.
func New(db *sql.DB, schema string) *Store { return &Store{DB: db, Schema: schema} }

func (s *Store) table() string { return dbutil.Table(s.Schema, "plans") }

// ensure creates the plans table in a shard map made before it existed.
func (s *Store) ensure(ctx context.Context) error {
	conn, err := s.DB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "USE "+dbutil.QuoteIdent(s.Schema)); err != nil {
		return err
	}
	_, err = conn.ExecContext(ctx, shardmap.PlansDDL)
	return err
}

// errNoTable is MySQL's "table doesn't exist".
const errNoTable = 1146

// Put stores p unless the stored copy has a higher revision. The caller
// holds the shard's lock (pipeline.Run and Abort call it through Env.Saved).
func (s *Store) Put(ctx context.Context, p *plans.Plan) error {
	return s.PutIn(ctx, s.DB, p)
}

// execer is a pool or a transaction.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// PutIn is Put through db, a transaction of the sharding database when the
// plan must change together with the shard map (pipeline.Repoint).
func (s *Store) PutIn(ctx context.Context, db execer, p *plans.Plan) error {
	if fault.On("planstore:put") {
		return errors.New("injected plan store failure")
	}
	doc, err := plans.Marshal(p)
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	put := func() error {
		args := []any{p.Revision, p.Operation, p.Source.ShardID, p.State, host, p.UpdatedAt, doc}
		res, err := db.ExecContext(ctx, "UPDATE "+s.table()+" SET revision = ?, operation = ?, shard_id = ?, state = ?, host = ?, updated_at = ?, document = ? WHERE id = ? AND revision < ?",
			append(args, p.ID, p.Revision)...)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n > 0 {
			return nil
		}
		// New, or the stored copy is as late or later: INSERT IGNORE leaves that one.
		_, err = db.ExecContext(ctx, "INSERT IGNORE INTO "+s.table()+" (revision, operation, shard_id, state, host, updated_at, document, id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
			append(args, p.ID)...)
		return err
	}
	err = put()
	if dbutil.ErrNumber(err) == errNoTable {
		if err = s.ensure(ctx); err == nil {
			err = put()
		}
	}
	if err != nil {
		return fmt.Errorf("store plan %s in %s.plans: %w", p.ID, s.Schema, err)
	}
	return nil
}

// Delete removes plan id's copy (a refused run's, that changed nothing).
func (s *Store) Delete(ctx context.Context, id string) error {
	_, err := s.DB.ExecContext(ctx, "DELETE FROM "+s.table()+" WHERE id = ?", id)
	if err != nil && dbutil.ErrNumber(err) != errNoTable {
		return fmt.Errorf("remove plan %s from %s.plans: %w", id, s.Schema, err)
	}
	return nil
}

// ErrNotFound is a plan id the store does not hold.
var ErrNotFound = errors.New("no such plan in the sharding database")

// Get reads and checks the stored copy of plan id.
func (s *Store) Get(ctx context.Context, id string) (*plans.Plan, error) {
	var doc []byte
	err := s.DB.QueryRowContext(ctx, "SELECT document FROM "+s.table()+" WHERE id = ?", id).Scan(&doc)
	if errors.Is(err, sql.ErrNoRows) || dbutil.ErrNumber(err) == errNoTable {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("read plan %s from %s.plans: %w", id, s.Schema, err)
	}
	p, err := plans.Unmarshal(doc)
	if err != nil {
		return nil, fmt.Errorf("plan %s in %s.plans: %w", id, s.Schema, err)
	}
	return p, nil
}

// List returns every stored plan, newest first (damaged ones with their error).
func (s *Store) List(ctx context.Context) ([]plans.Entry, error) {
	rows, err := s.DB.QueryContext(ctx, "SELECT id, document FROM "+s.table())
	if dbutil.ErrNumber(err) == errNoTable {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list plans in %s.plans: %w", s.Schema, err)
	}
	defer rows.Close()
	var out []plans.Entry
	for rows.Next() {
		var id string
		var doc []byte
		if err := rows.Scan(&id, &doc); err != nil {
			return nil, err
		}
		out = append(out, entry(id, "", doc))
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	sortEntries(out)
	return out, nil
}

// Where names the stored copy in listings.
func (s *Store) Where() string { return "sharding database " + s.Schema }

func entry(id, path string, doc []byte) plans.Entry {
	e := plans.Entry{ID: id, Path: path}
	p, err := plans.Unmarshal(doc)
	if err != nil {
		e.Error = err.Error()
		return e
	}
	e.Operation, e.Summary, e.State, e.UpdatedAt, e.Step = p.Operation, p.Summary, p.State, p.UpdatedAt, p.NextStep()
	return e
}

func sortEntries(es []plans.Entry) {
	sort.SliceStable(es, func(i, j int) bool { return es[i].UpdatedAt.After(es[j].UpdatedAt) })
}

// Later returns the later of two copies of one plan (either may be nil):
// the higher revision, then the later update.
func Later(a, b *plans.Plan) *plans.Plan {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case a.Revision != b.Revision:
		if a.Revision > b.Revision {
			return a
		}
		return b
	case b.UpdatedAt.After(a.UpdatedAt):
		return b
	}
	return a
}

// Load finds plan ref (an id or a file path) in the plan directory and in the
// store (nil: directory only) and returns the later copy and the local path a
// run saves it to. A plan found only in the store gets a fresh file in dir.
// 'plan watch' and the plan commands read plans through it.
func Load(ctx context.Context, dir string, s *Store, ref string) (*plans.Plan, string, error) {
	path := plans.Resolve(dir, ref)
	local, lerr := plans.Load(path)
	if lerr != nil && !errors.Is(lerr, os.ErrNotExist) {
		return nil, path, lerr
	}
	if s == nil {
		return local, path, lerr
	}
	id := ref
	if local != nil {
		id = local.ID
	} else if path != plans.Path(dir, ref) {
		id = strings.TrimSuffix(path[strings.LastIndexByte(path, os.PathSeparator)+1:], ".json")
	}
	stored, serr := s.Get(ctx, id)
	if serr != nil && !errors.Is(serr, ErrNotFound) {
		if local != nil {
			return local, path, nil // the store is unreachable or damaged: the file is still good
		}
		return nil, path, serr
	}
	p := Later(local, stored)
	if p == nil {
		return nil, path, lerr
	}
	return p, path, nil
}

// ListAll merges the plan directory's listing with the store's (s may be
// nil), one entry per plan: the later copy, with the local path when there is one.
func ListAll(ctx context.Context, dir string, s *Store) ([]plans.Entry, error) {
	local, err := plans.List(dir)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return local, nil
	}
	stored, err := s.List(ctx)
	if err != nil {
		return local, err
	}
	byID := map[string]int{}
	for i, e := range local {
		byID[e.ID] = i
	}
	for _, e := range stored {
		i, ok := byID[e.ID]
		if !ok {
			e.Path = s.Where()
			local = append(local, e)
			continue
		}
		if local[i].Error != "" || e.UpdatedAt.After(local[i].UpdatedAt) {
			e.Path = local[i].Path
			local[i] = e
		}
	}
	sortEntries(local)
	return local, nil
}

// Timeout bounds one store write: a slow sharding database must not hold up a run.
const Timeout = 3 * time.Second

// Unfinished returns the stored plans that are not done or aborted.
func (s *Store) Unfinished(ctx context.Context) ([]*plans.Plan, error) {
	rows, err := s.DB.QueryContext(ctx, "SELECT document FROM "+s.table()+" WHERE state NOT IN (?, ?)", plans.StateDone, plans.StateAborted)
	if dbutil.ErrNumber(err) == errNoTable {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read unfinished plans from %s.plans: %w", s.Schema, err)
	}
	defer rows.Close()
	var out []*plans.Plan
	for rows.Next() {
		var doc []byte
		if err := rows.Scan(&doc); err != nil {
			return nil, err
		}
		if p, err := plans.Unmarshal(doc); err == nil {
			out = append(out, p)
		}
	}
	return out, rows.Err()
}

// Unfinished returns every plan not done or aborted, from the plan directory
// and the store (s may be nil), the later copy of each.
func Unfinished(ctx context.Context, dir string, s *Store) ([]*plans.Plan, error) {
	byID := map[string]*plans.Plan{}
	names, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	for _, n := range names {
		if p, err := plans.Load(n); err == nil {
			byID[p.ID] = p
		}
	}
	if s != nil {
		stored, err := s.Unfinished(ctx)
		if err != nil {
			return nil, err
		}
		for _, p := range stored {
			byID[p.ID] = Later(byID[p.ID], p)
		}
	}
	var out []*plans.Plan
	for _, p := range byID {
		if p.State != plans.StateDone && p.State != plans.StateAborted {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// All returns every stored plan that reads back, by id (doctor compares
// each with its plan file).
func (s *Store) All(ctx context.Context) (map[string]*plans.Plan, error) {
	out := map[string]*plans.Plan{}
	var doc []byte
	err := dbutil.ScanEach(ctx, s.DB, "SELECT document FROM "+s.table(), nil, []any{&doc}, func() error {
		if p, err := plans.Unmarshal(doc); err == nil {
			out[p.ID] = p
		}
		return nil
	})
	if dbutil.ErrNumber(err) == errNoTable {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read plans from %s.plans: %w", s.Schema, err)
	}
	return out, nil
}
