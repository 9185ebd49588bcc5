package shardmap

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"

	"github.com/shardctl/shardctl/keyspace"
)

// importBatch is how many points one INSERT carries: a fleet's 100,000
// tenants are 50 statements inside the one transaction, not 100,000 round trips.
const importBatch = 2000

// Import registers the LIST points ps of function f in one transaction with
// one version bump, after the checks PlanImport makes over the whole set;
// a refusal names the line and writes nothing.
//
// A key the file maps to another shard than the map does changes hands
// without moving a row, so the rule of every hand edit applies (handover.go):
// it is accepted only when its shard provably holds no row of it, looked at
// once, then again with the points offline (writers retry rather than write
// into them), and the switch is made in the transaction that adds the rest.
// A tenant with rows is refused with the key move that takes its rows along.
func (s *Store) Import(ctx context.Context, f Function, ps []PointLine) (*Import, error) {
	m, err := s.Load(ctx)
	if err != nil {
		return nil, err
	}
	im, err := m.PlanImport(f, ps)
	if err != nil {
		return nil, err
	}
	if err := s.ImportRows(ctx, m, im); err != nil {
		return nil, err
	}
	if len(im.Repointed) == 0 || len(sharded(m, f)) == 0 {
		return s.importTx(ctx, f, ps, nil)
	}
	for _, r := range im.Repointed {
		if r.Status != Online {
			return nil, badInput("line %d: key %s of shard %d is offline (an operation on it is running?): import again when it is online", r.Line, r.Key, r.From)
		}
	}
	ref := Ref{FuncID: f.ID, Kind: List, Points: repointKeys(f, im.Repointed)}
	if err := s.Apply(ctx, "import: take the re-pointed keys offline", []Change{{Op: OpSetStatus, Ref: ref, Status: Offline}}); err != nil {
		return nil, err
	}
	done, err := func() (*Import, error) {
		m, err := s.Load(ctx)
		if err != nil {
			return nil, err
		}
		if err := s.ImportRows(ctx, m, im); err != nil { // the second look, behind the offline points
			return nil, err
		}
		return s.importTx(ctx, f, ps, im.Repointed)
	}()
	if err != nil {
		// Whatever the switch did not re-point goes back online where it is.
		if oerr := s.Apply(context.WithoutCancel(ctx), "import: put the re-pointed keys back online", []Change{{Op: OpSetStatus, Ref: ref, Status: Online}}); oerr != nil {
			return nil, fmt.Errorf("%w; and putting keys %s back online failed (run 'shardctl shardmap import' again, or 'shardctl shardmap set-status'): %v", err, Change{Ref: ref}.Describe(), oerr)
		}
		return nil, err
	}
	return done, nil
}

// importTx makes the import in one locked transaction, planned again on the
// locked map. offline are the re-points taken offline for it: the map must
// still hold each of them offline on the same shard, and no other.
func (s *Store) importTx(ctx context.Context, f Function, ps []PointLine, offline []Repoint) (*Import, error) {
	var im *Import
	err := s.Update(ctx, "import", func(tx *sql.Tx, m *Map) (bool, error) {
		var err error
		if im, err = m.PlanImport(f, ps); err != nil {
			return false, err
		}
		if len(im.Repointed) > 0 && len(sharded(m, f)) > 0 {
			want := map[string]int{}
			for _, r := range offline {
				want[r.Key] = r.From
			}
			for _, r := range im.Repointed {
				if from, ok := want[r.Key]; !ok || from != r.From || r.Status != Offline {
					return false, fmt.Errorf("line %d: key %s changed during the import; nothing was written", r.Line, r.Key)
				}
			}
		}
		if err := s.insertPoints(ctx, tx, f, im.Added); err != nil {
			return false, err
		}
		if len(im.Repointed) > 0 {
			if err := s.repointAll(ctx, tx, m, f, im.Repointed); err != nil {
				return false, err
			}
		}
		return im.Changes(), nil
	})
	return im, err
}

// insertPoints adds points in multi-row INSERTs of importBatch rows.
func (s *Store) insertPoints(ctx context.Context, tx *sql.Tx, f Function, ps []PointLine) error {
	col := "point"
	if f.KeyType == keyspace.StringKey {
		col = "point_str"
	}
	head := "INSERT INTO " + s.t("list_points") + " (func_id, " + col + ", shard_id, status) VALUES "
	for lo := 0; lo < len(ps); lo += importBatch {
		batch := ps[lo:min(lo+importBatch, len(ps))]
		args := make([]any, 0, 4*len(batch))
		for _, p := range batch {
			k, err := keyspace.ParseKey(p.Key, f.KeyType) // checked by PlanImport
			if err != nil {
				return fmt.Errorf("line %d: %w", p.Line, err)
			}
			args = append(args, f.ID, k.Value(), p.Shard, Online)
		}
		q := head + "(?, ?, ?, ?)" + strings.Repeat(", (?, ?, ?, ?)", len(batch)-1)
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("insert the points of lines %d to %d: %w", batch[0].Line, batch[len(batch)-1].Line, err)
		}
	}
	return nil
}

// repointAll re-points rs, each to its shard, and puts them online.
func (s *Store) repointAll(ctx context.Context, tx *sql.Tx, m *Map, f Function, rs []Repoint) error {
	by := map[int][]Repoint{}
	for _, r := range rs {
		by[r.Shard] = append(by[r.Shard], r)
	}
	var changes []Change
	for _, to := range sortedKeys(by) {
		changes = append(changes, Change{Op: OpRepoint, Ref: Ref{FuncID: f.ID, Kind: List, Points: repointKeys(f, by[to])}, ShardID: to})
	}
	changes = append(changes, Change{Op: OpSetStatus, Ref: Ref{FuncID: f.ID, Kind: List, Points: repointKeys(f, rs)}, Status: Online})
	for _, c := range changes {
		if _, err := s.applyOne(ctx, tx, m, c); err != nil {
			return fmt.Errorf("%s: %w", c.Describe(), err)
		}
	}
	return nil
}

// ImportRows refuses the re-points of im whose giving shard holds rows of
// the key: the key move that takes the rows along is the way to move them.
func (s *Store) ImportRows(ctx context.Context, m *Map, im *Import) error {
	if len(im.Repointed) == 0 {
		return nil
	}
	cols := sharded(m, im.Function)
	if len(cols) == 0 {
		return nil // no table is sharded by this function: no row can be stranded
	}
	by := map[int][]Repoint{}
	for _, r := range im.Repointed {
		by[r.From] = append(by[r.From], r)
	}
	for _, from := range sortedKeys(by) {
		rs := by[from]
		loc, err := m.Location(from)
		if err != nil {
			return err
		}
		refuse := func(r Repoint, why string) error {
			return badInput("line %d: key %s maps to shard %d, and %s: re-pointing it would leave its rows behind; nothing was written. Move the tenant with its rows: 'shardctl move --shard %d --keys %s --into %d'",
				r.Line, r.Key, r.From, why, r.From, r.Key, r.Shard)
		}
		if s.Rows == nil {
			return refuse(rs[0], fmt.Sprintf("this shardctl cannot read shard %d's server to prove it holds none", from))
		}
		for _, c := range cols {
			r, has, err := s.firstWithRows(ctx, loc, c, im.Function, rs)
			if err != nil {
				return fmt.Errorf("import: look for rows of the re-pointed keys on shard %d, table %s: %w", from, c.Table, err)
			}
			if has {
				return refuse(r, fmt.Sprintf("shard %d has its rows (table %s)", from, c.Table))
			}
		}
	}
	return nil
}

// firstWithRows finds a point of rs whose rows table c at loc holds: one
// probe for the whole set, then halves (a few probes for the one found).
func (s *Store) firstWithRows(ctx context.Context, loc Location, c Column, f Function, rs []Repoint) (Repoint, bool, error) {
	const chunk = 5000 // an IN list a server takes at once
	for lo := 0; lo < len(rs); lo += chunk {
		part := rs[lo:min(lo+chunk, len(rs))]
		has, err := s.Rows(ctx, loc, c.Table, c.Column, keyspace.Filter{Column: c.Column, Points: repointKeys(f, part)})
		if err != nil || !has {
			if err != nil {
				return Repoint{}, false, err
			}
			continue
		}
		for len(part) > 1 {
			half := part[:len(part)/2]
			has, err := s.Rows(ctx, loc, c.Table, c.Column, keyspace.Filter{Column: c.Column, Points: repointKeys(f, half)})
			if err != nil {
				return Repoint{}, false, err
			}
			if has {
				part = half
			} else {
				part = part[len(part)/2:]
			}
		}
		return part[0], true, nil
	}
	return Repoint{}, false, nil
}

func repointKeys(f Function, rs []Repoint) []keyspace.Key {
	out := make([]keyspace.Key, 0, len(rs))
	for _, r := range rs {
		k, _ := keyspace.ParseKey(r.Key, f.KeyType) // checked by PlanImport
		out = append(out, k)
	}
	return out
}

func sortedKeys[V any](m map[int]V) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}
