package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardctl/shardctl/binlog"
	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/operation"
	"github.com/shardctl/shardctl/pipeline/interlock"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
)

// Readiness fences at once when the other side is close, re-checks (no
// attempt burned) while it is not, and after the patience falls back to the
// old half-budget rule.
func TestReadiness(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, c := range []struct {
		took, budget, waited time.Duration
		want                 verdict
	}{
		{ms(5), ms(1000), 0, fenceNow},
		{ms(30), ms(1000), 0, fenceNow},      // the bound is 30 ms at most
		{ms(31), ms(1000), 0, recheck},       // over it: measure again
		{ms(20), ms(200), 0, fenceNow},       // budget/10
		{ms(21), ms(200), ms(1999), recheck}, // still patient
		{ms(21), ms(200), ms(2000), fenceRelaxed},
		{ms(100), ms(200), ms(2000), fenceRelaxed}, // half the budget: the old rule
		{ms(101), ms(200), ms(2000), notReady},
		{ms(600), ms(1000), ms(1500), recheck},
		{ms(600), ms(1000), ms(2000), notReady},
		{ms(2), ms(10), 0, recheck}, // the smallest budget: 1 ms
		{ms(1), ms(10), 0, fenceNow},
	} {
		if got := readiness(c.took, c.budget, c.waited); got != c.want {
			t.Errorf("readiness(took %s, budget %s, waited %s) = %d, want %d", c.took, c.budget, c.waited, got, c.want)
		}
	}
	if p := patience(ms(200)); p != 2*time.Second {
		t.Errorf("patience(200ms) = %s", p)
	}
	if p := patience(time.Hour); p != 10*time.Second {
		t.Errorf("patience(1h) = %s", p)
	}
}

func TestSumPhases(t *testing.T) {
	if s := sumPhases(map[string]float64{"fence": 10.5, "offline": 0, "final": 4.5}); s != 15 {
		t.Fatalf("sum %v", s)
	}
}

// recorder is blackoutWork that touches no server: it records the calls,
// keeps the state a server would (armed, fenced, offline, a held final
// position) and answers as scripted, so the attempt loop's rules are
// tested on their own.
type recorder struct {
	mu     sync.Mutex
	calls  []string
	pauses []time.Duration // every back-off waited
	left   []time.Duration // the budget left handed to the fence and the final catch-up

	armed, fenced, offlined bool
	final                   binlog.Position // what mark holds
	attempt                 int             // fence calls so far

	longTx    func(n int) string      // why the n-th check (from 1) finds a long transaction
	fenceErr  func(attempt int) error // the fence row's error in attempt n (from 1)
	catchup   func(attempt int) error // the final catch-up's
	slow      time.Duration           // how long the final catch-up takes
	recheckEr func(attempt int) error // the recheck's
	saveErr   func(n int) error       // the n-th save's
	longTxN   int
	saves     int

	snapshot   func() []byte         // the plan as a save would write it (nil: saves write nothing)
	saved      []int                 // the bytes of each save, with snapshot
	recheckRan func(d time.Duration) // the recheck was handed d
}

func (w *recorder) log(format string, a ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, fmt.Sprintf(format, a...))
}

func (w *recorder) pause(_ context.Context, d time.Duration) error {
	w.mu.Lock()
	w.pauses = append(w.pauses, d)
	w.mu.Unlock()
	w.log("pause")
	return nil
}
func (w *recorder) killBlockers(context.Context) { w.log("kill") }
func (w *recorder) wait(context.Context) error   { w.log("wait"); return nil }
func (w *recorder) longTransaction(context.Context, time.Duration) (string, error) {
	w.longTxN++
	if w.longTx != nil {
		if why := w.longTx(w.longTxN); why != "" {
			w.log("long transaction")
			return why, nil
		}
	}
	return "", nil
}
func (w *recorder) counters(context.Context) error                  { w.log("counters"); return nil }
func (w *recorder) blockers(context.Context) []plans.Blocker        { return nil }
func (w *recorder) caughtUp(context.Context) (time.Duration, error) { return 0, nil }
func (w *recorder) arm(context.Context, time.Duration) (string, error) {
	w.log("arm")
	w.armed = true
	return "", nil
}
func (w *recorder) disarm() { w.log("disarm") }
func (w *recorder) offline(context.Context) error {
	w.mu.Lock()
	w.offlined = true
	w.mu.Unlock()
	w.log("offline")
	return nil
}
func (w *recorder) fence(_ context.Context, left time.Duration) error {
	w.mu.Lock()
	w.attempt++
	n := w.attempt
	w.left = append(w.left, left)
	w.mu.Unlock()
	if w.fenceErr != nil {
		if err := w.fenceErr(n); err != nil {
			w.log("fence failed")
			return err
		}
	}
	w.fenced = true
	w.log("fence")
	return nil
}
func (w *recorder) finalPosition(context.Context) (binlog.Position, error) {
	return binlog.Position{File: "binlog.000001", Pos: uint32(1000 * w.attempt)}, nil
}
func (w *recorder) mark(final binlog.Position, held bool) {
	w.final = final
	if !held {
		w.final = binlog.Position{}
	}
	w.log("mark %v", held)
}
func (w *recorder) held() bool { return !w.final.IsZero() }
func (w *recorder) save() error {
	var b []byte
	if w.snapshot != nil {
		b = w.snapshot()
	}
	w.mu.Lock()
	w.saves++
	n := w.saves
	if w.snapshot != nil {
		w.saved = append(w.saved, len(b))
	}
	w.mu.Unlock()
	if w.saveErr != nil {
		return w.saveErr(n)
	}
	return nil
}
func (w *recorder) finalCatchup(_ context.Context, _ binlog.Position, d time.Duration) error {
	w.mu.Lock()
	w.left = append(w.left, d)
	w.mu.Unlock()
	time.Sleep(w.slow)
	if w.catchup != nil {
		if err := w.catchup(w.attempt); err != nil {
			w.log("final catch-up failed")
			return err
		}
	}
	w.log("final catch-up")
	return nil
}
func (w *recorder) recheck(_ context.Context, d time.Duration) (bool, error) {
	if w.recheckRan != nil {
		w.recheckRan(d)
	}
	if w.recheckEr != nil {
		if err := w.recheckEr(w.attempt); err != nil {
			return true, err
		}
	}
	return false, nil
}
func (w *recorder) done(context.Context, time.Time, int) error { w.log("done"); return nil }
func (w *recorder) removeFence(context.Context) error {
	w.armed, w.fenced = false, false
	w.log("remove fence")
	return nil
}
func (w *recorder) online(context.Context) error {
	w.mu.Lock()
	w.offlined = false
	w.mu.Unlock()
	w.log("online")
	return nil
}

// count is how many calls were name.
func (w *recorder) count(name string) int {
	n := 0
	for _, c := range w.calls {
		if c == name {
			n++
		}
	}
	return n
}

// testRunner is a runner with no server and no plan file, and the
// blackout options given.
func testRunner(attempts int, budget, backoff time.Duration) (*runner, *blackout) {
	p := plans.New("move", "move shard 1")
	p.Options.FenceAttempts = attempts
	p.Options.MaxBlackoutMS = plans.MillisOf(budget)
	p.Options.BackoffMS = plans.MillisOf(backoff)
	r := &runner{p: p, env: Env{Log: slog.New(slog.DiscardHandler), Observer: NopObserver{}}}
	return r, &blackout{side: plans.SideSource, other: "the target", trying: "fencing", postponed: "postponed: ", backedOff: "backed off: "}
}

// Attempts that back off are each lifted (the final position forgotten,
// then the fence removed, then the mappings online), the back-off doubles
// up to 30 s between them, and the loop gives up after FenceAttempts with
// the last reason, the fence gone and the shard online.
func TestBlackoutBacksOffDoublingAndGivesUp(t *testing.T) {
	r, b := testRunner(5, time.Second, 10*time.Second)
	w := &recorder{fenceErr: func(int) error { return fence.ErrBudget }}
	last, err := r.blackoutLoop(context.Background(), b, w)
	if err != nil || last == nil || !strings.Contains(last.Error(), "beyond the budget") {
		t.Fatalf("got last %v, err %v: want the last reason and no error", last, err)
	}
	if want := []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second, 30 * time.Second}; fmt.Sprint(w.pauses) != fmt.Sprint(want) {
		t.Errorf("back-offs %v, want %v (doubling, at most 30 s)", w.pauses, want)
	}
	if n := w.count("arm"); n != 5 {
		t.Errorf("%d attempts armed the fence, want 5 (FenceAttempts)", n)
	}
	if n := w.count("online"); n != 5 {
		t.Errorf("the mappings went back online %d times, want after each of the 5 attempts", n)
	}
	if w.fenced || w.armed || w.offlined || w.held() {
		t.Errorf("after giving up: fenced %v, armed %v, offline %v, final position held %v; want none", w.fenced, w.armed, w.offlined, w.held())
	}
	if len(r.p.Attempts) != 5 {
		t.Fatalf("%d attempts on record, want 5", len(r.p.Attempts))
	}
	for i, a := range r.p.Attempts {
		if !strings.HasPrefix(a.Result, "backed off: ") || a.BlackoutM <= 0 {
			t.Errorf("attempt %d: result %q, blackout %v ms; want backed off with its blackout", i+1, a.Result, a.BlackoutM)
		}
	}
}

// A failed attempt is lifted in order: the final position is forgotten
// before the fence goes (a resume must not finish behind a fence that is
// gone), then the mappings are online; the next attempt, after one
// back-off, goes through and leaves the fence for the cutover.
func TestBlackoutLiftsThenRetries(t *testing.T) {
	r, b := testRunner(3, time.Second, time.Millisecond)
	w := &recorder{catchup: func(n int) error {
		if n == 1 {
			return errors.New("the tail lost the target")
		}
		return nil
	}}
	last, err := r.blackoutLoop(context.Background(), b, w)
	if last != nil || err != nil {
		t.Fatalf("got last %v, err %v; want the second attempt through", last, err)
	}
	// (the mappings go offline beside the fence, in either order)
	want := "wait counters arm fence final catch-up failed mark false remove fence online disarm pause kill wait counters arm fence final catch-up done disarm"
	got := strings.Join(slices.DeleteFunc(slices.Clone(w.calls), func(c string) bool { return c == "mark true" || c == "offline" }), " ")
	if got != want {
		t.Errorf("calls:\n got %s\nwant %s", got, want)
	}
	if !w.fenced || !w.offlined || !w.held() {
		t.Errorf("after the good attempt: fenced %v, offline %v, held %v; want all (the cutover lifts them)", w.fenced, w.offlined, w.held())
	}
	if len(w.pauses) != 1 || len(r.p.Attempts) != 2 || !strings.Contains(r.p.Attempts[0].Result, "lost the target") {
		t.Errorf("pauses %v, attempts %+v", w.pauses, r.p.Attempts)
	}
}

// An attempt that overruns the budget is lifted even when every part of it
// worked, and each wait within it gets at most the budget.
func TestBlackoutBudget(t *testing.T) {
	budget := 20 * time.Millisecond
	r, b := testRunner(2, budget, time.Millisecond)
	w := &recorder{slow: budget + 5*time.Millisecond}
	last, err := r.blackoutLoop(context.Background(), b, w)
	if err != nil || last == nil || !strings.Contains(last.Error(), "over the 20ms budget") {
		t.Fatalf("got last %v, err %v; want the budget's reason", last, err)
	}
	if w.count("done") != 0 || w.count("online") != 2 || w.fenced || w.offlined || w.held() {
		t.Errorf("over budget: done %d, online %d, fenced %v, offline %v, held %v; want every attempt lifted", w.count("done"), w.count("online"), w.fenced, w.offlined, w.held())
	}
	for _, d := range w.left {
		if d > budget {
			t.Errorf("a wait got %s, over the %s budget", d, budget)
		}
	}
}

// A long transaction postpones at most three attempts in a row without
// arming the fence; the fourth goes ahead.
func TestBlackoutLongTransactionPostponesThree(t *testing.T) {
	r, b := testRunner(4, time.Second, time.Millisecond)
	w := &recorder{longTx: func(int) string { return "transaction 7 has been open 5s" }}
	if last, err := r.blackoutLoop(context.Background(), b, w); last != nil || err != nil {
		t.Fatalf("got last %v, err %v; want the fourth attempt through", last, err)
	}
	if n := w.count("arm"); n != 1 {
		t.Errorf("armed %d times, want once (after three postponements)", n)
	}
	for i, a := range r.p.Attempts[:3] {
		if !strings.HasPrefix(a.Result, "postponed: transaction 7") {
			t.Errorf("attempt %d: %q, want postponed", i+1, a.Result)
		}
	}
}

// A recheck that finds a mismatch stops the step: lifted, not retried.
func TestBlackoutMismatchStops(t *testing.T) {
	r, b := testRunner(5, time.Second, time.Millisecond)
	w := &recorder{recheckEr: func(int) error { return fmt.Errorf("%w: 3 rows differ", ErrMismatch) }}
	last, err := r.blackoutLoop(context.Background(), b, w)
	if !errors.Is(err, ErrMismatch) || last != nil {
		t.Fatalf("got last %v, err %v; want the mismatch", last, err)
	}
	if w.count("arm") != 1 || w.count("online") != 1 || w.fenced || w.held() {
		t.Errorf("arms %d, online %d, fenced %v, held %v; want one attempt, lifted", w.count("arm"), w.count("online"), w.fenced, w.held())
	}
}

// When the plan on disk holds the final position and saving it forgotten
// fails, the fence stays (a resume finishes behind it) and the loop stops.
func TestBlackoutKeepsTheFenceAResumeNeeds(t *testing.T) {
	r, b := testRunner(5, time.Second, time.Millisecond)
	w := &recorder{
		catchup: func(int) error { return errors.New("the tail lost the target") },
		saveErr: func(n int) error {
			if n > 1 {
				return errors.New("disk full")
			}
			return nil
		},
	}
	last, err := r.blackoutLoop(context.Background(), b, w)
	if err == nil || !strings.Contains(err.Error(), "the fence stays") || last != nil {
		t.Fatalf("got last %v, err %v; want the fence kept", last, err)
	}
	if !w.fenced || !w.held() || w.count("remove fence") != 0 || w.count("arm") != 1 {
		t.Errorf("fenced %v, held %v, removals %d, arms %d; want the fence and the final position kept, one attempt", w.fenced, w.held(), w.count("remove fence"), w.count("arm"))
	}
}

// A recheck behind the fence gets what is left of the budget less the
// lift's reserve, so an attempt whose recheck finds a difference, or runs
// out of time, is lifted within --max-blackout; the difference stops the
// step, with the fence lifted and the shard online.
func TestBlackoutRecheckLeavesRoomToLift(t *testing.T) {
	budget := time.Second
	for _, c := range []struct {
		name string
		err  error
		stop bool // the step stops (a difference) rather than backing off
	}{
		{"a difference", fmt.Errorf("%w: 3 rows differ", ErrMismatch), true},
		{"out of time", errors.New("re-checking 4 changing chunks did not fit the budget"), false},
	} {
		r, b := testRunner(2, budget, time.Millisecond)
		var handed []time.Duration
		w := &recorder{
			recheckRan: func(d time.Duration) { handed = append(handed, d) },
			recheckEr:  func(int) error { return c.err },
		}
		last, err := r.blackoutLoop(context.Background(), b, w)
		if c.stop != errors.Is(err, ErrMismatch) || c.stop == (last != nil) {
			t.Fatalf("%s: last %v, err %v", c.name, last, err)
		}
		if len(handed) == 0 {
			t.Fatalf("%s: the recheck never ran", c.name)
		}
		for _, d := range handed {
			if d > budget-liftReserve(budget) {
				t.Errorf("%s: the recheck was handed %s of the %s budget; want at most %s, leaving the lift its reserve", c.name, d, budget, budget-liftReserve(budget))
			}
		}
		if w.fenced || w.offlined || w.held() || w.count("online") != len(handed) {
			t.Errorf("%s: fenced %v, offline %v, held %v, lifted %d of %d attempts; want every attempt lifted", c.name, w.fenced, w.offlined, w.held(), w.count("online"), len(handed))
		}
	}
}

// listMap is a LIST map of two shards: shard 1 owns points 1..owned,
// shard 2 owns 300 keys above them.
func listMap(owned int) *shardmap.Map {
	m := &shardmap.Map{Version: 9,
		Locations: []shardmap.Location{{ShardID: 1, Host: "a", Port: 1, Schema: "t1"}, {ShardID: 2, Host: "b", Port: 2, Schema: "t2"}},
		Functions: []shardmap.Function{{ID: 1, Name: "tenants", Type: shardmap.List, KeyType: keyspace.IntKey}}}
	add := func(k, shard int) {
		p := keyspace.IntK(int64(k))
		m.Mappings = append(m.Mappings, shardmap.Mapping{FuncID: 1, Kind: shardmap.List, Point: &p, ShardID: shard, Status: shardmap.Online})
	}
	for k := 1; k <= owned; k++ {
		add(k, 1)
	}
	for k := owned + 1; k <= owned+300; k++ {
		add(k, 2)
	}
	return m
}

// Nothing a key move does inside the blackout grows with the tenants its
// shards own: three tenants moved out of a shard of 300 and out of a shard
// of 100,000 make the same calls, and each save inside the blackout writes
// the same plan bytes (the owned points are a count and a digest, not a
// list: docs/plans.md), give or take the count's digits.
func TestBlackoutDoesNotGrowWithTheTenants(t *testing.T) {
	run := func(owned int) (calls []string, saved []int) {
		r, b := testRunner(1, time.Second, time.Millisecond)
		r.p.Operation = operation.MoveKeys
		r.p.Source = plans.Endpoint{ShardID: 1, Host: "a", Port: 1, Schema: "t1"}
		r.p.Target = plans.Endpoint{ShardID: 2, Host: "b", Port: 2, Schema: "t2"}
		moving := shardmap.Ref{FuncID: 1, Kind: shardmap.List, Points: []keyspace.Key{keyspace.IntK(11), keyspace.IntK(12), keyspace.IntK(13)}}
		r.p.Offline = []shardmap.Change{{Op: shardmap.OpSetStatus, Ref: moving, Status: shardmap.Offline}}
		r.p.Cutover = []shardmap.Change{{Op: shardmap.OpRepoint, Ref: moving, ShardID: 2}, {Op: shardmap.OpSetStatus, Ref: moving, Status: shardmap.Online}}
		interlock.RecordAgainst(listMap(owned), r.p)
		w := &recorder{snapshot: func() []byte {
			r.mu.Lock()
			defer r.mu.Unlock()
			b, err := plans.Marshal(r.p)
			if err != nil {
				t.Error(err)
			}
			return b
		}}
		if last, err := r.blackoutLoop(context.Background(), b, w); last != nil || err != nil {
			t.Fatalf("%d tenants: last %v, err %v", owned, last, err)
		}
		return w.calls, w.saved
	}
	calls300, saved300 := run(300)
	calls100k, saved100k := run(100_000)
	// The offline change runs beside the fence (blackoutLoop), so the two
	// may be recorded in either order: compare the calls as a set.
	slices.Sort(calls300)
	slices.Sort(calls100k)
	if fmt.Sprint(calls300) != fmt.Sprint(calls100k) {
		t.Errorf("calls inside the blackout differ with the tenants:\n   300: %v\n100000: %v", calls300, calls100k)
	}
	if len(saved300) == 0 || len(saved300) != len(saved100k) {
		t.Fatalf("saves inside the blackout: %v with 300 tenants, %v with 100,000", saved300, saved100k)
	}
	for i := range saved300 {
		if d := saved100k[i] - saved300[i]; d < -16 || d > 16 {
			t.Errorf("save %d inside the blackout wrote %d bytes with 300 tenants, %d with 100,000; want the same give or take the count's digits", i+1, saved300[i], saved100k[i])
		}
	}
}
