package checks

import (
	"context"
	"testing"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/pipeline/checks/checktest"
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

// checkEnv builds schema on server 1 with stmts and returns the check
// environment of an op plan from it to the same-named schema on server 2.
func checkEnv(t *testing.T, op, schema string, stmts ...string) (*testenv.Env, *CheckEnv) {
	t.Helper()
	env, src, p := checktest.Source(t, op, schema, stmts...)
	return env, &CheckEnv{Src: src, Dst: env.DB(t, 2, ""), Plan: p}
}
