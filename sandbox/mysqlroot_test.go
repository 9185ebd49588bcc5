package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRootScriptRunsPastItsStdin runs the embedded server-root.sh exactly as
// 'shardctl sandbox up --flavor mysql' does, on a root that is already
// built (the marker and an executable mysqld), so nothing is built: the
// script must reach its ready check, which comes after it closes its stdin
// (bash reading the script from stdin stopped there, exit 0, nothing done).
func TestRootScriptRunsPastItsStdin(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	if err := os.MkdirAll(filepath.Join(root, "usr", "sbin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr", "sbin", "mysqld"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, ".shardctl-ready"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := Root{Kind: "mysql", Dir: root, Server: "/usr/sbin/mysqld"}.script(context.Background()).CombinedOutput()
	if err != nil {
		t.Fatalf("server-root.sh %s: %v\n%s", root, err, out)
	}
	if want := "mysql-root: " + root + " is ready"; !strings.Contains(string(out), want) {
		t.Fatalf("server-root.sh %s stopped before its ready check (no %q in its output):\n%s", root, want, out)
	}
}
