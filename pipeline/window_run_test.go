package pipeline

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/shardctl/shardctl/lock"
	"github.com/shardctl/shardctl/pipeline/window"
	"github.com/shardctl/shardctl/plans"
)

// TestSecondWindowRequestIsBusy: of two concurrent 'plan revert'/'plan
// complete' calls, the one that finds the other's request waiting is busy
// (lock.ErrBusy, exit 4), not resumable.
func TestSecondWindowRequestIsBusy(t *testing.T) {
	p := plans.New("move", "move shard 1")
	p.Window = &plans.Window{DurationS: 60, Serving: plans.SideTarget}
	for _, s := range plans.Steps[:slices.Index(plans.Steps, plans.StepCutover)+1] {
		p.Step(s).State = plans.Done
	}
	p.State = plans.StateRunning
	path := filepath.Join(t.TempDir(), p.ID+".json")
	if err := plans.Save(path, p); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(window.RequestPath(path), []byte(`{"id":"other","action":"complete"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := RequestWindow(context.Background(), Env{}, path, window.ActionRevert, time.Second)
	if !errors.Is(err, lock.ErrBusy) || errors.Is(err, window.ErrNotNow) {
		t.Fatalf("a request while another waits: %v, want busy", err)
	}
}
