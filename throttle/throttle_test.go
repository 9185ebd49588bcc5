package throttle

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

type gaugeFunc func(ctx context.Context) (string, error)

func (f gaugeFunc) Over(ctx context.Context) (string, error) { return f(ctx) }

// A gauge that cannot read its metric stops the chunk: the throttler fails closed.
func TestUnreadableMetricFailsClosed(t *testing.T) {
	bad := errors.New("cannot read")
	th := &Throttler{gauges: []Gauge{gaugeFunc(func(context.Context) (string, error) { return "", bad })}}
	if err := th.Wait(context.Background(), 100); !errors.Is(err, bad) {
		t.Fatalf("Wait = %v, want the metric's error", err)
	}
}

// A gauge over its limit holds the chunk until it is not.
func TestGaugeOverHolds(t *testing.T) {
	calls := 0
	th := &Throttler{gauges: []Gauge{gaugeFunc(func(context.Context) (string, error) {
		calls++
		if calls < 2 {
			return "throttled: test", nil
		}
		return "", nil
	})}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := th.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if calls < 2 || th.Reason() != "" {
		t.Fatalf("calls %d, reason %q", calls, th.Reason())
	}
}

func TestControlFilePauses(t *testing.T) {
	f := filepath.Join(t.TempDir(), "control")
	if err := os.WriteFile(f, []byte("pause = true # hold\nmax-rate=5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	th := &Throttler{opts: Config{ControlFile: f}}
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	if err := th.Wait(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait while paused = %v", err)
	}
	if th.Reason() != "paused by the control file" || th.rate != 5 {
		t.Fatalf("reason %q, rate %d", th.Reason(), th.rate)
	}
}
