package testenv

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/sandbox"
)

// The first binary starts the shared sandbox and leaves it running; the
// next finds it by its config and starts nothing; a server that died is
// started again, on the same port.
func TestSharedSandboxStartsOnceAndIsReused(t *testing.T) {
	if testing.Short() {
		t.Skip("needs real servers: skipped under -short (scripts/test.sh --fast or the full suite runs it)")
	}
	skipUnavailable(t, serversAvailable())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cfg, srv, err := upShared(ctx, dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sandbox.Down(context.Background(), cfg, true) })
	if cfg.DieWithParent {
		t.Fatal("the shared sandbox's servers would die with the binary that started them")
	}
	again, srv2, err := upShared(ctx, dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	if again.BasePort != cfg.BasePort || srv2[0].PID != srv[0].PID {
		t.Fatalf("the second binary started its own server: port %d pid %d, the first's port %d pid %d", again.BasePort, srv2[0].PID, cfg.BasePort, srv[0].PID)
	}
	if err := sandbox.Kill(cfg, 1); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		st, err := sandbox.Status(ctx, cfg)
		if err == nil && !st[0].Running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the killed server still runs")
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, srv3, err := upShared(ctx, dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !srv3[0].Answers || srv3[0].PID == srv[0].PID || srv3[0].Port != srv[0].Port {
		t.Fatalf("the dead server was not started again on its port: %+v (before: %+v)", srv3[0], srv[0])
	}
}

// A shared directory another flavor's pass started is refused, and nothing starts.
func TestSharedSandboxOfTheOtherFlavorIsRefused(t *testing.T) {
	dir := t.TempDir()
	other := sandbox.FlavorMySQL
	if MySQL() {
		other = sandbox.FlavorMariaDB
	}
	b, err := json.Marshal(sandbox.Config{Dir: dir, Servers: 3, BasePort: 25000, Flavor: other})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, sharedConfig), b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = upShared(context.Background(), dir, 3)
	if err == nil || !strings.Contains(err.Error(), "give each flavor its own") {
		t.Fatalf("got %v, want the other flavor refused", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "s1")); err == nil {
		t.Fatal("a server was started for the refused directory")
	}
}
