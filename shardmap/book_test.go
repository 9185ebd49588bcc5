package shardmap

import (
	"context"

	"github.com/shardctl/shardctl/keyspace"
)

// BookRangeLookup is the book's range lookup query (Example 7-7's inner form),
// which the tests check the Store's lookups against.
func (s *Store) BookRangeLookup(ctx context.Context, funcID int, kt keyspace.KeyType, key any) (int, error) {
	col := "ranges.lower_bound"
	if kt == keyspace.StringKey {
		col = "ranges.lower_bound_str"
	}
	var id int
	err := s.DB.QueryRowContext(ctx, "SELECT shard_id FROM "+s.t("ranges")+" AS ranges JOIN "+s.t("locations")+" AS locations USING (shard_id)"+
		" WHERE ranges.func_id = ? AND ? >= "+col+" ORDER BY "+col+" DESC LIMIT 1", funcID, key).Scan(&id)
	return id, err
}

// BookHashLookup is the book's consistent-hash query: the point with the
// greatest hash below MD5(key), else the greatest point.
func (s *Store) BookHashLookup(ctx context.Context, funcID int, key any) (int, error) {
	var id int
	err := s.DB.QueryRowContext(ctx, "(SELECT shard_id FROM "+s.t("hashes")+" WHERE func_id = ? AND MD5(?) > hash ORDER BY hash DESC LIMIT 1)"+
		" UNION ALL (SELECT shard_id FROM "+s.t("hashes")+" WHERE func_id = ? AND hash = (SELECT MAX(hash) FROM "+s.t("hashes")+" WHERE func_id = ?)) LIMIT 1",
		funcID, key, funcID, funcID).Scan(&id)
	return id, err
}
