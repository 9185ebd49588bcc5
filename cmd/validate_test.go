package cmd

import (
	"os"
	"strings"
	"testing"
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
