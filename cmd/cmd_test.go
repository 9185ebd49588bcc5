package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/sandbox"
	"github.com/shardctl/shardctl/shardmap"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type result struct {
	code           int
	stdout, stderr string
}

func run(t *testing.T, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), args, &out, &errb)
	return result{code, out.String(), errb.String()}
}

// cliEnv seeds a shard map named name and returns the flags that reach it.
func cliEnv(t *testing.T, name string) []string {
	t.Helper()
	env := testenv.Get(t)
	t.Setenv("SHARDCTL_PASSWORD", sandbox.ToolPassword)
	db := env.DB(t, 1, "")
	if _, err := db.Exec("DROP DATABASE IF EXISTS `" + name + "`"); err != nil {
		t.Fatal(err)
	}
	store := shardmap.New(db, name)
	_, err := sandbox.Seed(context.Background(), store, sandbox.SeedConfig{Servers: []dbutil.Addr{env.Addr(1), env.Addr(2), env.Addr(3)},
		Creds: sandbox.Creds(), Shards: 3, Employees: 20, SchemaPrefix: name + "_s"})
	if err != nil {
		t.Fatal(err)
	}
	return []string{"--shardmap", env.Addr(1).String() + "/" + name, "--user", sandbox.ToolUser}
}

func snapshot(t *testing.T, flags []string) string {
	t.Helper()
	r := run(t, append(flags, "shardmap", "show", "-o", "json")...)
	if r.code != 0 {
		t.Fatalf("show: %d %s", r.code, r.stderr)
	}
	return r.stdout
}

func TestBadInputExitsTwoAndChangesNothing(t *testing.T) {
	flags := cliEnv(t, "cli_bad")
	before := snapshot(t, flags)
	env := testenv.Get(t)
	cases := map[string][]string{
		"duplicate range":   append(flags, "shardmap", "add-range", "--function", "employees", "--lower", "1000000", "--shard", "1"),
		"overlapping range": append(flags, "shardmap", "add-range", "--function", "employees", "--lower", "1500000", "--shard", "1"),
		"unknown shard":     append(flags, "shardmap", "add-range", "--function", "employees", "--lower", "9000000", "--shard", "77"),
		"string key":        append(flags, "shardmap", "add-range", "--function", "employees", "--lower", "ten", "--shard", "1"),
		"lookup string key": append(flags, "shardmap", "lookup", "ten", "--table", "employees"),
		"bad status":        append(flags, "shardmap", "set-status", "--shard", "1", "sideways"),
		"unknown flag":      append(flags, "shardmap", "show", "--frobnicate"),
		"missing arg":       append(flags, "shardmap", "lookup", "--table", "employees"),
		"bad output":        append(flags, "shardmap", "show", "-o", "xml"),
		"malformed DSN":     {"--shardmap", "shardctl@tcp(127.0.0.1:notaport/x", "shardmap", "show"},
		"no schema":         {"--shardmap", "127.0.0.1:3306", "shardmap", "show"},
		"unreachable":       {"--shardmap", "127.0.0.1:1/cli_bad", "shardmap", "show"},
	}
	for name, args := range cases {
		r := run(t, args...)
		if r.code != ExitBadInput {
			t.Errorf("%s: exit %d, want 2 (stderr %q)", name, r.code, r.stderr)
		}
		if !strings.HasPrefix(r.stderr, "shardctl: ") || len(r.stderr) < 20 {
			t.Errorf("%s: unclear message %q", name, r.stderr)
		}
	}
	// A wrong password: exit 2, the message says access denied, and never shows the password.
	t.Setenv("SHARDCTL_PASSWORD", "hunter2-wrong-secret")
	r := run(t, "--shardmap", env.Addr(1).String()+"/cli_bad", "shardmap", "show", "-o", "json")
	if r.code != ExitBadInput || !strings.Contains(r.stderr, "access denied") {
		t.Errorf("wrong password: exit %d %q", r.code, r.stderr)
	}
	if strings.Contains(r.stderr+r.stdout, "hunter2-wrong-secret") {
		t.Errorf("the password leaked: %q %q", r.stderr, r.stdout)
	}
	var jerr map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &jerr); err != nil || jerr["exit_code"] != float64(2) {
		t.Errorf("json error object: %q %v", r.stdout, err)
	}
	t.Setenv("SHARDCTL_PASSWORD", sandbox.ToolPassword)
	if after := snapshot(t, flags); after != before {
		t.Fatalf("refused commands changed the shard map:\n%s\n%s", before, after)
	}
}

func TestJSONOutputShapes(t *testing.T) {
	flags := cliEnv(t, "cli_json")
	var m struct {
		Version   int64 `json:"version"`
		Locations []struct {
			ShardID int    `json:"shard_id"`
			Host    string `json:"host"`
			Port    int    `json:"port"`
			Schema  string `json:"schema"`
		} `json:"locations"`
		Mappings []struct {
			ShardID int    `json:"shard_id"`
			Status  string `json:"status"`
		} `json:"mappings"`
	}
	if err := json.Unmarshal([]byte(snapshot(t, flags)), &m); err != nil || len(m.Locations) != 3 || len(m.Mappings) != 3 || m.Version < 1 {
		t.Fatalf("show json: %+v %v", m, err)
	}
	r := run(t, append(flags, "shardmap", "lookup", "1000005", "--table", "salaries", "-o", "json")...)
	var res shardmap.Resolution
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || res.Location.ShardID != m.Locations[1].ShardID {
		t.Fatalf("lookup json: %q %v", r.stdout, err)
	}
	r = run(t, append(flags, "status", "--exact", "-o", "json")...)
	var st struct {
		Version int64         `json:"version"`
		Shards  []ShardStatus `json:"shards"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st.Shards) != 3 {
		t.Fatalf("status json: %q %v", r.stdout, err)
	}
	for _, s := range st.Shards {
		if !s.Reachable || s.Rows < 20*5 || s.Status != "online" {
			t.Fatalf("status of shard %d: %+v", s.ShardID, s)
		}
	}
	// set-status offline shows in lookup, then back online.
	if r := run(t, append(flags, "shardmap", "set-status", "--shard", fmt.Sprint(m.Locations[0].ShardID), "offline")...); r.code != 0 {
		t.Fatal(r.stderr)
	}
	r = run(t, append(flags, "shardmap", "lookup", "5", "--function", "employees", "-o", "json")...)
	if !strings.Contains(r.stdout, `"status": "offline"`) {
		t.Fatalf("offline not shown: %s", r.stdout)
	}
	run(t, append(flags, "shardmap", "set-status", "--shard", fmt.Sprint(m.Locations[0].ShardID), "online")...)
	if r := run(t, "version", "-o", "json"); r.code != 0 || !json.Valid([]byte(r.stdout)) {
		t.Fatalf("version: %+v", r)
	}
}
