package cmd

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/shardctl/shardctl/plans"
)

func TestViewLines(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := newViewModel("move shard 1")
	m.setState(plans.StepPreflight, "started", t0)
	m.setState(plans.StepPreflight, plans.Done, t0.Add(20*time.Millisecond))
	m.setState(plans.StepCopy, "started", t0)
	m.progress(plans.StepCopy, 1000, 10000, "", t0.Add(time.Second))
	m.progress(plans.StepCopy, 3000, 10000, "throttled", t0.Add(3*time.Second))
	m.setAttempt(1, plans.Attempt{Result: "backed off: too slow", BlackoutM: 120.5, Blockers: []plans.Blocker{
		{ID: 12, User: "app@10.0.0.5", AgeMS: 2774, Table: "employees", Lock: "SHARED_WRITE", Source: "metadata_locks"}, {ID: 13}}})
	m.setAttempt(2, plans.Attempt{Result: "fencing"})
	got := m.lines(viewStyle{width: 200}, t0.Add(3*time.Second))
	want := []string{
		"move shard 1",
		"  ✓ preflight  done in 20ms",
		"  · create     pending",
		"  > copy       [======>             ]  30%  3,000/~10,000 rows  1,000/s  ETA 7s  (throttled)",
		"  · catchup    pending",
		"  · verify     pending",
		"  · fence      pending",
		"      cutover attempt 1: backed off: too slow (blackout 120.5 ms)",
		"        held by session 12 (app@10.0.0.5), open 2.774s, holds employees (SHARED_WRITE): idle in transaction [metadata_locks] (and 1 more)",
		"      cutover attempt 2: fencing",
		"  · cutover    pending",
		"  · cleanup    pending",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Cut to the width, colour only when asked.
	for _, l := range m.lines(viewStyle{width: 30}, t0) {
		if n := utf8.RuneCountInString(l); n > 29 {
			t.Errorf("line of %d runes at width 30: %q", n, l)
		}
		if strings.Contains(l, "\x1b") {
			t.Errorf("colour without colour: %q", l)
		}
	}
	if c := m.lines(viewStyle{width: 80, color: true}, t0); !strings.Contains(c[1], sgrGreen) {
		t.Errorf("no colour: %q", c[1])
	}

	// A failure shows the first line of its reason.
	m.setState(plans.StepCopy, plans.Failed, t0.Add(4*time.Second))
	m.step(plans.StepCopy).reason = reasonOf(errors.New("move shard 1 (s1), step copy: table t: boom\nmore"))
	if l := m.lines(viewStyle{width: 200}, t0)[3]; l != "  ✗ copy       failed: table t: boom" {
		t.Errorf("failed line: %q", l)
	}
	// A failure the run heals in place says so, and when.
	m.retrying(2*time.Second, 72400*time.Millisecond, errors.New("move shard 1 (s1), step copy: read chunk: invalid connection"))
	if l := m.lines(viewStyle{width: 200}, t0)[3]; l != "  ✗ copy       failed: retrying in 2s after: read chunk: invalid connection (retry budget 1m12s left)" {
		t.Errorf("retrying line: %q", l)
	}
}

// Verify and cleanup report no total: the view expects the rows copied.
func TestViewExpectsCopiedRows(t *testing.T) {
	t0 := time.Now()
	m := newViewModel("")
	m.setState(plans.StepCopy, "started", t0)
	m.progress(plans.StepCopy, 3000, 9000, "", t0)
	m.setState(plans.StepCopy, plans.Done, t0)
	m.setState(plans.StepVerify, "started", t0)
	m.progress(plans.StepVerify, 1500, 1500, "", t0)
	if l := m.lines(viewStyle{width: 200}, t0)[4]; !strings.Contains(l, " 50%  1,500/~3,000 rows") {
		t.Errorf("verify line: %q", l)
	}
}

func TestViewFromPlan(t *testing.T) {
	p := plans.New("move", "move shard 9")
	now := time.Now()
	p.Step(plans.StepPreflight).State = plans.Done
	p.Step(plans.StepPreflight).Started, p.Step(plans.StepPreflight).Ended = now.Add(-time.Second), now
	p.Step(plans.StepCreate).State = plans.Failed
	p.Step(plans.StepCreate).Error = "disk full"
	p.Attempts = []plans.Attempt{{Result: "cut over", BlackoutM: 80}}
	m := newViewModel("")
	m.fromPlan(p, now)
	out := strings.Join(m.lines(viewStyle{width: 200}, now), "\n")
	for _, s := range []string{"move shard 9", "✓ preflight  done in 1s", "✗ create     failed: disk full", "cutover attempt 1: cut over (blackout 80.0 ms)"} {
		if !strings.Contains(out, s) {
			t.Errorf("missing %q in\n%s", s, out)
		}
	}
}

func TestCount(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567"} {
		if got := count(n); got != want {
			t.Errorf("count(%d) = %s", n, got)
		}
	}
}
