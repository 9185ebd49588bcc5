package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/lock"
	"github.com/shardctl/shardctl/shardmap"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var ctx = context.Background()

// exec runs a statement or fails the test.
var exec = testenv.Exec

func TestLockRefusesSecondHolderAndFreesOnRelease(t *testing.T) {
	env := testenv.Get(t)
	db := env.DB(t, 1, "")
	store := shardmap.New(db, "lock_map")
	if err := store.Init(ctx); err != nil {
		t.Fatal(err)
	}
	names := []string{lock.Name("lock_map", 3), lock.Name("lock_map", 4)}
	a, err := lock.Acquire(ctx, db, "lock_map", names, "plan-A (pid 1 on host)")
	if err != nil {
		t.Fatal(err)
	}
	_, err = lock.Acquire(ctx, db, "lock_map", []string{lock.Name("lock_map", 4)}, "plan-B")
	if err == nil || !strings.Contains(err.Error(), "plan-A (pid 1 on host)") {
		t.Fatalf("second holder: %v", err)
	}
	a.Release()
	b, err := lock.Acquire(ctx, db, "lock_map", []string{lock.Name("lock_map", 4)}, "plan-B")
	if err != nil {
		t.Fatal(err)
	}
	// Killing the holder's connection (as kill -9 of the process would)
	// frees the lock and ends the context bound to it.
	errLost := errors.New("lost")
	bound, cancel := b.Bind(ctx, errLost)
	defer cancel(nil)
	var id int64
	db.QueryRow("SELECT connection_id FROM lock_map.locks WHERE name = ?", lock.Name("lock_map", 4)).Scan(&id)
	exec(t, db, "KILL ?", id)
	select {
	case <-bound.Done():
		if !errors.Is(context.Cause(bound), errLost) {
			t.Fatalf("bound context ended with %v, want the loss", context.Cause(bound))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the loss not signalled after the lock connection died")
	}
	c, err := lock.Acquire(ctx, db, "lock_map", []string{lock.Name("lock_map", 4)}, "plan-C")
	if err != nil {
		t.Fatal(err)
	}
	c.Release()
}
