// Package checktest holds what the tests of the preflight checks and of the
// pipeline's own planning probes share: a plan between the test servers, and
// the form of a refusal.
package checktest

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/pipeline/failure"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/tables"
)

// Plan is a plan of op from schema src on server 1 to schema dst on
// server 2, copying every table src has.
func Plan(t *testing.T, env *testenv.Env, op, src, dst string) *plans.Plan {
	t.Helper()
	p := plans.New(op, "")
	p.Source = plans.Endpoint{ShardID: 1, Host: env.Addr(1).Host, Port: env.Addr(1).Port, Schema: src}
	p.Target = plans.Endpoint{ShardID: 2, Host: env.Addr(2).Host, Port: env.Addr(2).Port, Schema: dst}
	ts, err := tables.Inspect(context.Background(), env.DB(t, 1, ""), src)
	if err != nil {
		t.Fatal(err)
	}
	p.Copy = ts
	return p
}

// WantRefused fails the test unless err is a refusal that says want.
func WantRefused(t *testing.T, err error, want string) {
	t.Helper()
	if !errors.Is(err, failure.ErrRefused) || !strings.Contains(err.Error(), want) {
		t.Fatalf("want a refusal saying %q, got %v", want, err)
	}
}

// Source builds schema on server 1 with stmts and returns it with an op plan
// from it to the same-named schema on server 2.
func Source(t *testing.T, op, schema string, stmts ...string) (*testenv.Env, *sql.DB, *plans.Plan) {
	t.Helper()
	env := testenv.Get(t)
	src := env.DB(t, 1, "")
	testenv.Schema(t, src, schema, stmts...)
	return env, src, Plan(t, env, op, schema, schema)
}
