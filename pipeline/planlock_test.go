package pipeline

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/lock"
	"github.com/shardctl/shardctl/operation"
	"github.com/shardctl/shardctl/plans"
)

// A process that loaded a plan and got its lock only after another process
// saved the plan again works from a stale copy: stillLatest refuses it
// (lock.ErrBusy, exit 4), naming the process that changed the plan; the
// copy it loaded, as late as the file, passes.
func TestStillLatestRefusesAStaleCopy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "move-x.json")
	p := plans.New(operation.Move, "move shard 1")
	p.State = plans.StateStopped
	if err := plans.Save(path, p); err != nil {
		t.Fatal(err)
	}
	mine, err := plans.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	env := Env{PlanPath: path}
	if err := stillLatest(context.Background(), env, mine); err != nil {
		t.Fatalf("the latest copy refused: %v", err)
	}
	// Another process runs it to the end meanwhile.
	p.RunBy, p.State = "pid 4242 on hostb", plans.StateRunning
	if err := plans.Save(path, p); err != nil {
		t.Fatal(err)
	}
	err = stillLatest(context.Background(), env, mine)
	if !errors.Is(err, lock.ErrBusy) || !strings.Contains(err.Error(), "another process (pid 4242 on hostb) worked on it") || !strings.Contains(err.Error(), "nothing was changed here") {
		t.Fatalf("a stale copy while another process ran it: %v", err)
	}
	p.State = plans.StateDone
	for _, s := range p.Steps {
		p.Step(s.Name).State = plans.Done
	}
	if err := plans.Save(path, p); err != nil {
		t.Fatal(err)
	}
	err = stillLatest(context.Background(), env, mine)
	if !errors.Is(err, lock.ErrBusy) || !strings.Contains(err.Error(), "is done already: another process (pid 4242 on hostb) finished it") {
		t.Fatalf("a stale copy of a plan done meanwhile: %v", err)
	}
}
