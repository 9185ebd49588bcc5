package shardmap

import (
	"context"
	"database/sql"
	"fmt"
)

// Reads is how many times s has read the whole map.
func (s *Store) Reads() int64 { return s.reads.Load() }

// PointsRead is how many LIST points s's reads of the map have returned.
func (s *Store) PointsRead() int64 { return s.points.Load() }

// ApplyInMemory makes changes in one locked transaction as Apply does and
// returns the map they were made to (mem) with a fresh read of the tables
// in the same transaction (fresh); the transaction commits.
func (s *Store) ApplyInMemory(ctx context.Context, changes []Change) (mem, fresh *Map, err error) {
	err = s.Update(ctx, "apply in memory", func(tx *sql.Tx, m *Map) (bool, error) {
		for _, c := range changes {
			if _, err := s.applyOne(ctx, tx, m, c); err != nil {
				return false, fmt.Errorf("%s: %w", c.Describe(), err)
			}
		}
		mem = m
		fresh, err = s.load(ctx, tx)
		return true, err
	})
	return mem, fresh, err
}
