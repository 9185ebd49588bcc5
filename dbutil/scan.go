package dbutil

import (
	"context"
)

// Dest returns n values of T and pointers to them for rows.Scan: the
// destination of a row whose columns are known only when it is read
// (sql.RawBytes to read without copying, sql.NullString for text, any).
func Dest[T any](n int) ([]T, []any) {
	vals := make([]T, n)
	ptrs := make([]any, n)
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	return vals, ptrs
}

// ScanEach runs query and scans every row it returns into dest, calling fn
// after each; it stops at fn's first error.
func ScanEach(ctx context.Context, q Querier, query string, args []any, dest []any, fn func() error) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		if err := fn(); err != nil {
			return err
		}
	}
	return rows.Err()
}
