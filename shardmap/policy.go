package shardmap

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
)

// setPolicy records shard id's policy in m.
func (m *Map) setPolicy(id int, dedicated bool) {
	for i := range m.Policies {
		if m.Policies[i].ShardID == id {
			if !dedicated {
				m.Policies = append(m.Policies[:i:i], m.Policies[i+1:]...)
				return
			}
			m.Policies[i].Dedicated = true
			return
		}
	}
	if dedicated {
		m.Policies = append(m.Policies, ShardPolicy{ShardID: id, Dedicated: true})
		sort.Slice(m.Policies, func(i, j int) bool { return m.Policies[i].ShardID < m.Policies[j].ShardID })
	}
}

// SetPolicy marks shard id dedicated (or shared again) in one transaction
// with a version bump; changed is false when it was so already. The map is
// upgraded first when it is of an older format (the policies' table).
func (s *Store) SetPolicy(ctx context.Context, id int, dedicated bool) (changed bool, err error) {
	if err := s.Upgrade(ctx); err != nil {
		return false, err
	}
	c := Change{Op: OpSetPolicy, ShardID: id, Policy: PolicyShared}
	if dedicated {
		c.Policy = PolicyDedicated
	}
	err = s.Update(ctx, "set policy", func(tx *sql.Tx, m *Map) (bool, error) {
		if _, err := m.Location(id); err != nil {
			return false, err
		}
		if m.Format < 2 {
			return false, fmt.Errorf("the shard map in schema %s is of format %d; run 'shardctl shardmap init' to upgrade it", s.Schema, m.Format)
		}
		changed, err = s.applyOne(ctx, tx, m, c)
		return changed, err
	})
	return changed, err
}
