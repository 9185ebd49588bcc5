package pipeline

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/shardctl/shardctl/plans"
)

// An unforced save does not wait for the plan file and the sharding
// database's copy (the copy's writers checkpoint through it while they hold
// their watermark); a forced save waits for it and writes after it, and a
// background save's failure comes back from the next save.
func TestUnforcedSaveRunsInTheBackground(t *testing.T) {
	p := plans.New("move", "move shard 1")
	path := filepath.Join(t.TempDir(), "plan.json")
	gate := make(chan struct{})
	var revs []int64
	r := &runner{p: p, env: Env{Log: slog.New(slog.DiscardHandler), Observer: NopObserver{}, PlanPath: path,
		Saved: func(s *plans.Plan) {
			<-gate
			revs = append(revs, s.Revision) // the saves run one at a time: no lock needed
		}}}
	done := make(chan error, 1)
	go func() { done <- r.save(false) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an unforced save waited for the plan's copy to be stored")
	}
	if err := r.save(false); err != nil { // another runs: skipped
		t.Fatal(err)
	}
	forced := make(chan error, 1)
	go func() { forced <- r.save(true) }()
	select {
	case <-forced:
		t.Fatal("a forced save did not wait for the save before it")
	case <-time.After(200 * time.Millisecond):
	}
	gate <- struct{}{}
	gate <- struct{}{}
	if err := <-forced; err != nil {
		t.Fatal(err)
	}
	if len(revs) != 2 || revs[1] != revs[0]+1 {
		t.Fatalf("saved revisions %v, want two in order", revs)
	}
	if q, err := plans.Load(path); err != nil || q.Revision != revs[1] {
		t.Fatalf("plan file: %v %v, want revision %d", q, err, revs[1])
	}

	// A background save that fails: the next save says so.
	r.env.PlanPath = filepath.Join(path, "not-a-directory", "plan.json")
	r.env.Saved = nil
	r.lastSave = time.Time{}
	if err := r.save(false); err != nil {
		t.Fatalf("the unforced save itself: %v", err)
	}
	waitSaved(r)
	r.lastSave = time.Time{}
	if err := r.save(false); err == nil {
		t.Fatal("the background save's failure was lost")
	}
	if err := r.save(true); err == nil {
		t.Fatal("a forced save into a missing directory succeeded")
	}
}

// waitSaved returns once r's background save, if any, has ended.
func waitSaved(r *runner) {
	r.saving.Lock()
	defer r.saving.Unlock()
}
