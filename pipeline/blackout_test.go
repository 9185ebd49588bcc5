package pipeline

import (
	"testing"
	"time"
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
