package hooks

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/plans"
)

func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func testPlan() *plans.Plan {
	p := plans.New("move", "move shard 3")
	p.Source = plans.Endpoint{ShardID: 3, Host: "10.0.0.1", Port: 3306, Schema: "s3"}
	p.Target = plans.Endpoint{ShardID: 3, Host: "10.0.0.2", Port: 3307, Schema: "s3"}
	return p
}

func TestRunPassesVariablesAndNoPassword(t *testing.T) {
	t.Setenv("SHARDCTL_PASSWORD", "sekrit")
	t.Setenv("SHARDCTL_SHARD_PASSWORD", "sekrit2")
	dir := t.TempDir()
	out := filepath.Join(dir, "env")
	h := script(t, dir, "h", "env > "+out)
	r := &Runner{Paths: map[string][]string{"before-fence": {h}}}
	p := testPlan()
	if err := r.Run(context.Background(), "before-fence", p, "fence"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out)
	env := string(b)
	for _, want := range []string{"SHARDCTL_PLAN_ID=" + p.ID, "SHARDCTL_OPERATION=move", "SHARDCTL_SHARD=3", "SHARDCTL_SOURCE=10.0.0.1:3306/s3",
		"SHARDCTL_TARGET=10.0.0.2:3307/s3", "SHARDCTL_STEP=fence", "SHARDCTL_HOOK_POINT=before-fence"} {
		if !strings.Contains(env, want+"\n") {
			t.Errorf("hook environment lacks %s:\n%s", want, env)
		}
	}
	if strings.Contains(env, "sekrit") {
		t.Errorf("a password reached the hook:\n%s", env)
	}
	// A point without hooks is a no-op.
	if err := r.Run(context.Background(), "after-cutover", p, "cutover"); err != nil {
		t.Fatal(err)
	}
}

func TestRunFailureAndTimeout(t *testing.T) {
	dir := t.TempDir()
	var log bytes.Buffer
	fail := script(t, dir, "fail", "echo nope; exit 3")
	slow := script(t, dir, "slow", "sleep 30 & sleep 30")
	r := &Runner{Paths: map[string][]string{"plan-start": {fail}, "on-failure": {slow}}, Timeout: 300 * time.Millisecond, Output: &log}
	err := r.Run(context.Background(), "plan-start", testPlan(), "preflight")
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(log.String(), "nope") {
		t.Fatalf("failing hook: %v (output %q)", err, log.String())
	}
	start := time.Now()
	err = r.Run(context.Background(), "on-failure", testPlan(), "copy")
	if err == nil || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("slow hook: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the timeout did not stop the hook and its children: %s", d)
	}
}

func TestParse(t *testing.T) {
	m := map[string][]string{}
	pts := []string{"plan-start", "before-fence"}
	if err := Parse(m, "before-fence=/bin/true", pts); err != nil || m["before-fence"][0] != "/bin/true" {
		t.Fatal(err, m)
	}
	for _, bad := range []string{"before-fence", "nowhere=/bin/true", "plan-start="} {
		if err := Parse(m, bad, pts); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
