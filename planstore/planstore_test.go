package planstore

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// A shard map made before the plans table existed gets it at the first
// write; a lower revision never overwrites a higher one; Load takes the
// later of the file and the stored copy.
func TestPutGetLoad(t *testing.T) {
	ctx := context.Background()
	env := testenv.Get(t)
	db := env.DB(t, 1, "")
	if _, err := db.Exec("DROP DATABASE IF EXISTS planstore_t"); err != nil {
		t.Fatal(err)
	}
	if err := shardmap.New(db, "planstore_t").Init(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("DROP TABLE planstore_t.plans"); err != nil {
		t.Fatal(err)
	}
	s := New(db, "planstore_t")
	if es, err := s.List(ctx); err != nil || len(es) != 0 {
		t.Fatalf("list without a table: %v %v", es, err)
	}
	dir := t.TempDir()
	p := plans.New("move", "move shard 1")
	p.Source.ShardID = 1
	path := plans.Path(dir, p.ID)
	for i := 0; i < 3; i++ {
		if err := plans.Save(path, p); err != nil {
			t.Fatal(err)
		}
		if err := s.Put(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	old := *p
	old.Revision = 1
	old.State = plans.StateAborted
	if err := s.Put(ctx, &old); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, p.ID)
	if err != nil || got.Revision != 3 || got.State != p.State {
		t.Fatalf("stored: %v %+v", err, got)
	}
	// Another host: no local file, the stored copy, a fresh local path.
	other := t.TempDir()
	q, qpath, err := Load(ctx, other, s, p.ID)
	if err != nil || q.Revision != 3 || qpath != plans.Path(other, p.ID) {
		t.Fatalf("load on another host: %v %v %s", err, q, qpath)
	}
	// The later copy wins: the store moves on, this host's file is stale.
	p.State = plans.StateDone
	for i := range p.Steps {
		p.Steps[i].State = plans.Done // a done plan finished its steps (else it reads as damaged)
	}
	p.Revision = 10
	if err := s.Put(ctx, p); err != nil {
		t.Fatal(err)
	}
	q, _, err = Load(ctx, dir, s, p.ID)
	if err != nil || q.State != plans.StateDone {
		t.Fatalf("stale file won: %v %+v", err, q)
	}
	es, err := ListAll(ctx, other, s)
	if err != nil || len(es) != 1 || es[0].State != plans.StateDone || es[0].Path != s.Where() {
		t.Fatalf("list: %v %+v", err, es)
	}
	if _, _, err := Load(ctx, other, s, "move-none"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("unknown plan: %v", err)
	}
	// What a save adds to a run (one is inside the cutover's blackout): logged, not asserted.
	start := time.Now()
	for i := 0; i < 50; i++ {
		p.Revision++
		if err := s.Put(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("plan store write: %s each (50 writes)", time.Since(start)/50)
}
