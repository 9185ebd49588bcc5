package pipeline

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
	"github.com/shardctl/shardctl/tables"
)

// CheckCopy refuses (shardmap.ErrBadInput) to verify against `at` when the
// schema, or one of the tables ts the serving side has, is not there: the
// operator named the wrong server or schema for the copy, which is input to
// fix, not a failure to retry or a difference to repair.
func CheckCopy(ctx context.Context, db *sql.DB, at plans.Endpoint, ts []tables.Table) error {
	have := map[string]bool{}
	var schemas int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", at.Schema).Scan(&schemas); err != nil {
		return fmt.Errorf("verify: look for schema %s on %s: %w", at.Schema, at.Addr(), err)
	}
	if schemas == 0 {
		return fmt.Errorf("%w: schema %s does not exist on %s: give --against the server that holds the copy (and --schema its name, when it differs from the shard's)", shardmap.ErrBadInput, at.Schema, at.Addr())
	}
	var name string
	if err := dbutil.ScanEach(ctx, db, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?", []any{at.Schema}, []any{&name},
		func() error { have[name] = true; return nil }); err != nil {
		return fmt.Errorf("verify: list the tables of %s on %s: %w", at.Schema, at.Addr(), err)
	}
	var missing []string
	for _, t := range ts {
		if !have[t.Name] {
			missing = append(missing, t.Name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: schema %s on %s lacks the shard's tables %s: give --against (and --schema) the copy of the shard, or create the tables there", shardmap.ErrBadInput, at.Schema, at.Addr(), strings.Join(missing, ", "))
	}
	return nil
}
