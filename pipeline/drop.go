package pipeline

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/shardctl/shardctl/dbutil"
)

// dropSchema drops a schema, trying again a few times when the server could
// not remove its directory (error 1010): seen once in about 30 corpus moves
// on MariaDB 10.11, a <table>.TRG- file (the backup trigger DDL keeps while it
// runs) was still in the directory when DROP DATABASE tried to remove it.
func dropSchema(ctx context.Context, db *sql.DB, schema string) error {
	var err error
	for try := 0; try < 4; try++ {
		if try > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(try) * 500 * time.Millisecond):
			}
		}
		if _, err = db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+dbutil.QuoteIdent(schema)); dbutil.ErrNumber(err) != 1010 {
			return err
		}
	}
	return fmt.Errorf("%w (files the server does not know are left in the schema's directory: remove them on the server, then resume)", err)
}
