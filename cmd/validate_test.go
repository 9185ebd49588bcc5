package cmd

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/internal/testenv"
)

func TestOutputJSONPrescan(t *testing.T) {
	for args, want := range map[string]bool{
		"move -o json": true, "move -ojson": true, "move --output=json": true, "move --output json": true,
		"move -o text": false, "move -- -o json": false, "move": false,
	} {
		if got := outputJSON(splitArgs(args)); got != want {
			t.Errorf("%q: %v, want %v", args, got, want)
		}
	}
}

func splitArgs(s string) []string { return strings.Fields(s) }

// The binary next to the working directory is not a config file.
func TestFindConfigReadsOnlyConfigFiles(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("HOME", dir)
	if err := os.WriteFile("shardctl", []byte("\x7fELF\x01\x02"), 0o755); err != nil {
		t.Fatal(err)
	}
	if f := findConfig(); f != "" {
		t.Fatalf("found %q", f)
	}
	if err := os.WriteFile("shardctl.yml", []byte("user: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if f := findConfig(); f != "shardctl.yml" {
		t.Fatalf("found %q, want shardctl.yml", f)
	}
}

// An unused location can be removed; a used one cannot.
func TestRemoveShard(t *testing.T) {
	flags := cliEnv(t, "cli_rm")
	env := testenv.Get(t)
	if _, err := env.DB(t, 2, "").Exec("CREATE DATABASE IF NOT EXISTS cli_rm_spare"); err != nil {
		t.Fatal(err)
	}
	r := run(t, append(flags, "shardmap", "add-shard", "--server", env.Addr(2).String(), "--schema", "cli_rm_spare", "-o", "json")...)
	var added struct {
		ShardID int `json:"shard_id"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &added) != nil || added.ShardID == 0 {
		t.Fatalf("add-shard: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := run(t, append(flags, "shardmap", "remove-shard", "--shard", "1")...); r.code != ExitBadInput || !strings.Contains(r.stderr, "mappings") {
		t.Fatalf("remove a used shard: %d %s", r.code, r.stderr)
	}
	if r := run(t, append(flags, "shardmap", "remove-shard", "--shard", fmt.Sprint(added.ShardID))...); r.code != 0 {
		t.Fatalf("remove an unused shard: %d %s", r.code, r.stderr)
	}
	if strings.Contains(snapshot(t, flags), "cli_rm_spare") {
		t.Fatal("the location is still in the shard map")
	}
	if r := run(t, append(flags, "shardmap", "add-shard", "--server", env.Addr(2).String(), "--schema", "cli_rm_nothere")...); r.code != ExitBadInput || !strings.Contains(r.stderr, "does not exist") {
		t.Fatalf("add-shard of a missing schema: %d %s", r.code, r.stderr)
	}
}
