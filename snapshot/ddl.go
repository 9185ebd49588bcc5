package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/shardctl/shardctl/dbutil"
)

// ErrDefinitionChanged is wrapped in the error a copy with WatchDDL stops
// with when a table's columns changed on the source while it was copied.
// Every chunk written so far was read before the change; the caller brings
// the target through the change (the binlog tail, which runs the statement
// at its place in the stream) and copies on from the saved watermarks, with
// the table's new column list.
var ErrDefinitionChanged = errors.New("the table's columns changed on the source during the copy")

// definition returns a table's column names on the source and a digest of
// its column definitions (names, types, nullability, order). Index changes
// leave it alone: they change no row a chunk reads.
func definition(ctx context.Context, q dbutil.Querier, schema, table string) (names []string, digest string, err error) {
	h := sha256.New()
	var name, ctype, null string
	err = dbutil.ScanEach(ctx, q, `SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`, []any{schema, table}, []any{&name, &ctype, &null}, func() error {
		names = append(names, name)
		fmt.Fprintf(h, "%q %q %s\n", name, ctype, null)
		return nil
	})
	return names, hex.EncodeToString(h.Sum(nil)), err
}

// sameNames reports whether the source's columns are the ones the copy reads.
func sameNames(have, planned []string) bool {
	if len(have) != len(planned) {
		return false
	}
	for i := range have {
		if !strings.EqualFold(have[i], planned[i]) {
			return false
		}
	}
	return true
}

// watch is a copy's view of one table's definition (Copier.WatchDDL): the
// digest it started from, compared again after each chunk is read, before
// the chunk is handed to a writer. A change that lands between a chunk's
// read and its write is harmless: the read finished first (a schema change
// waits for the read's metadata lock), so the chunk holds rows of the old
// shape, which the target still has.
type watch struct {
	schema, table string
	digest        string // "" when not watching
}

// start reads the table's definition and refuses when its columns are no
// longer the ones planned (a change while no copy of it ran).
func (w *watch) start(ctx context.Context, q dbutil.Querier, planned []string) error {
	names, digest, err := definition(ctx, q, w.schema, w.table)
	if err != nil {
		return err
	}
	if !sameNames(names, planned) {
		return fmt.Errorf("%w: it has (%s), the copy reads (%s)", ErrDefinitionChanged, strings.Join(names, ", "), strings.Join(planned, ", "))
	}
	w.digest = digest
	return nil
}

// check returns ErrDefinitionChanged (wrapped) when the table's definition
// differs from the one the copy started from; readErr, if set, is the error
// a chunk read met (a dropped or renamed column fails the read), returned as
// it is when the definition did not change.
func (w *watch) check(ctx context.Context, q dbutil.Querier, readErr error) error {
	if w.digest == "" {
		return readErr
	}
	_, digest, err := definition(ctx, q, w.schema, w.table)
	if err != nil {
		return errors.Join(readErr, err)
	}
	if digest != w.digest {
		if readErr != nil {
			return fmt.Errorf("%w (the chunk read failed: %v)", ErrDefinitionChanged, readErr)
		}
		return ErrDefinitionChanged
	}
	return readErr
}
