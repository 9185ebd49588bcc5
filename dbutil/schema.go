package dbutil

import (
	"context"
	"database/sql"
)

// SchemaExists reports whether the server has the schema (a name it would
// refuse, such as one over 64 characters, it does not have).
func SchemaExists(ctx context.Context, db *sql.DB, schema string) (bool, error) {
	var n int
	err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", schema).Scan(&n)
	return n > 0, err
}
