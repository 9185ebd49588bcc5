package testenv

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/shardctl/shardctl/dbutil"
)

// Schema gives the test a fresh schema on db: one an earlier run left is
// dropped, stmts run in it, and it is dropped when the test ends.
func Schema(t testing.TB, db *sql.DB, schema string, stmts ...string) {
	t.Helper()
	DropAtEnd(t, db, schema)
	InSchema(t, db, "", "DROP DATABASE IF EXISTS "+dbutil.QuoteIdent(schema), "CREATE DATABASE "+dbutil.QuoteIdent(schema))
	InSchema(t, db, schema, stmts...)
}

// DropAtEnd drops schema from db when the test ends (a target a test lets
// the code under test create).
func DropAtEnd(t testing.TB, db *sql.DB, schema string) {
	t.Cleanup(func() { _, _ = db.Exec("DROP DATABASE IF EXISTS " + dbutil.QuoteIdent(schema)) })
}

// InSchema runs stmts on one connection whose default schema is schema
// ("": none); the connection is then discarded so the default stays out of
// the pool.
func InSchema(t testing.TB, db *sql.DB, schema string, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	defer conn.Raw(func(any) error { return driver.ErrBadConn }) // USE must not outlive this
	if schema != "" {
		if _, err := conn.ExecContext(ctx, "USE "+dbutil.QuoteIdent(schema)); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range stmts {
		if _, err := conn.ExecContext(ctx, SQL(s)); err != nil { // MariaDB-only test SQL rewritten on MySQL
			t.Fatalf("%s: %v", s, err)
		}
	}
}

var nameSeq atomic.Int64

// UniqueName is prefix_N, N unique in this test binary, within a schema
// name's 64 characters.
func UniqueName(prefix string) string { return numbered(prefix, nameSeq.Add(1)) }

func numbered(prefix string, n int64) string {
	suffix := fmt.Sprintf("_%d", n)
	return prefix[:min(len(prefix), 64-len(suffix))] + suffix
}

// NewPair gives the test pools on servers 1 and 2 and two fresh schema
// names for them, prefix_src_N and prefix_dst_N (neither created), both
// dropped when the test ends: a copy's source and target.
func NewPair(t testing.TB, prefix string) (src, dst *sql.DB, sname, tname string) {
	t.Helper()
	env := Get(t)
	src, dst = env.DB(t, 1, ""), env.DB(t, 2, "")
	n := nameSeq.Add(1)
	sname, tname = numbered(prefix+"_src", n), numbered(prefix+"_dst", n)
	DropAtEnd(t, src, sname)
	DropAtEnd(t, dst, tname)
	return src, dst, sname, tname
}
