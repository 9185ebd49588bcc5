package pipeline

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/tables"
)

// runCheck runs the registered check name, as RunChecks would: each
// check_*.go file's test goes through the registry, so a check that is
// dropped from it fails its test.
func runCheck(t *testing.T, name string, c *CheckEnv) error {
	t.Helper()
	for _, ch := range registry {
		if ch.Name == name {
			if !ch.applies(c.Plan) {
				t.Fatalf("check %q does not apply to the test's %s plan", name, c.Plan.Operation)
			}
			return ch.Run(context.Background(), c)
		}
	}
	t.Fatalf("no check %q registered", name)
	return nil
}

// wantRefused fails the test unless err is a refusal that says want.
func wantRefused(t *testing.T, err error, want string) {
	t.Helper()
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), want) {
		t.Fatalf("want a refusal saying %q, got %v", want, err)
	}
}

// checkPlan is a plan of op from schema src on server 1 to schema dst on
// server 2, copying every table src has.
func checkPlan(t *testing.T, env *testenv.Env, op, src, dst string) *plans.Plan {
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

// checkEnv builds schema on server 1 with stmts and returns the check
// environment of an op plan from it to the same-named schema on server 2.
func checkEnv(t *testing.T, op, schema string, stmts ...string) (*testenv.Env, *CheckEnv) {
	t.Helper()
	env := testenv.Get(t)
	src := env.DB(t, 1, "")
	testenv.Schema(t, src, schema, stmts...)
	return env, &CheckEnv{Src: src, Dst: env.DB(t, 2, ""), Plan: checkPlan(t, env, op, schema, schema)}
}

// setGlobal sets a server variable for the test and puts it back after.
func setGlobal(t *testing.T, db *sql.DB, name string, value any) {
	t.Helper()
	var old string
	if err := db.QueryRow("SELECT @@GLOBAL." + name).Scan(&old); err != nil {
		t.Fatal(err)
	}
	testenv.Exec(t, db, "SET GLOBAL "+name+" = ?", value)
	var back any = old
	if n, err := strconv.ParseInt(old, 10, 64); err == nil {
		back = n // a numeric variable refuses its value as a string (1232)
	}
	t.Cleanup(func() {
		if _, err := db.Exec("SET GLOBAL "+name+" = ?", back); err != nil {
			t.Errorf("put %s back to %s: %v", name, old, err)
		}
	})
}
