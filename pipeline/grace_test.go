package pipeline

import (
	"testing"
	"time"

	"github.com/shardctl/shardctl/plans"
)

func TestLastSwitch(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	p := &plans.Plan{}
	if !lastSwitch(p).IsZero() {
		t.Fatal("a plan that never switched has a switch time")
	}
	p.Attempts = []plans.Attempt{
		{Started: t0, BlackoutM: 40, Result: "backed off: lock wait"},
		{Started: t0.Add(time.Second), BlackoutM: 25, Result: "cut over (ready at once)"},
	}
	if got, want := lastSwitch(p), t0.Add(time.Second+25*time.Millisecond); !got.Equal(want) {
		t.Fatalf("cutover: got %s, want %s", got, want)
	}
	// A reverse window's later switch back is the one that counts.
	p.Window = &plans.Window{Switches: []plans.Switch{{At: t0.Add(time.Minute), To: plans.SideSource}}}
	if got, want := lastSwitch(p), t0.Add(time.Minute); !got.Equal(want) {
		t.Fatalf("window: got %s, want %s", got, want)
	}
}
