package metrics

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/shardctl/shardctl/plans"
)

// Parse reads Prometheus text format, as node_exporter and Prometheus would.
func parse(t *testing.T, r io.Reader) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		t.Fatalf("not Prometheus text format: %v", err)
	}
	return fams
}

func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		if c := m.GetCounter(); c != nil {
			return c.GetValue(), true
		}
		return m.GetGauge().GetValue(), true
	}
	return 0, false
}

// start is a sink writing a file in a temporary directory (and serving
// addr, if set) with the series of a move of shard 4.
func start(t *testing.T, addr string) (*Sink, string, *plans.Plan, *Observer) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "shardctl.prom")
	s, err := New(file, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := plans.New("move", "move shard 4")
	p.Source.ShardID = 4
	return s, file, p, s.Plan(p)
}

// closeAndRead closes the sink and parses the file it wrote last.
func closeAndRead(t *testing.T, s *Sink, file string) map[string]*dto.MetricFamily {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return parse(t, f)
}

func TestFileAndHTTP(t *testing.T) {
	s, file, p, o := start(t, "127.0.0.1:0")
	o.Step(plans.StepCopy, "started")
	o.Progress(plans.StepCopy, 1234, 2000, "")
	o.Lag(250 * time.Millisecond)
	lbl := map[string]string{"plan": p.ID, "operation": "move", "shard": "4"}

	resp, err := http.Get("http://" + s.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	fams := parse(t, resp.Body)
	resp.Body.Close()
	if v, ok := value(fams, "shardctl_rows_copied_total", lbl); !ok || v != 1234 {
		t.Errorf("rows copied over HTTP: %v %v", v, ok)
	}
	if v, ok := value(fams, "shardctl_step", map[string]string{"plan": p.ID, "step": "copy"}); !ok || v != 1 {
		t.Errorf("step copy: %v %v", v, ok)
	}
	if v, _ := value(fams, "shardctl_lag_seconds", lbl); v != 0.25 {
		t.Errorf("lag: %v", v)
	}

	p.State = plans.StateDone
	p.Result.RowsCopied, p.Result.BlackoutMS = 2000, 42
	o.Finish(p)
	fams = closeAndRead(t, s, file)
	if v, _ := value(fams, "shardctl_blackout_seconds", lbl); v != 0.042 {
		t.Errorf("blackout: %v", v)
	}
	if v, _ := value(fams, "shardctl_plan_state", map[string]string{"plan": p.ID, "state": "done"}); v != 1 {
		t.Errorf("state done: %v", v)
	}
	if v, _ := value(fams, "shardctl_step", map[string]string{"plan": p.ID, "step": "copy"}); v != 0 {
		t.Errorf("no step runs after the end: %v", v)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(file), "*")); len(left) != 1 || !strings.HasSuffix(left[0], "shardctl.prom") {
		t.Errorf("temp files left: %v", left)
	}
}

// Counts are counters named _total that only go up, whatever the running
// totals reported; each finished cutover's blackout lands once in a
// histogram of seconds by operation, its buckets from 1 ms to 10 s.
func TestCountersAndBlackoutHistogram(t *testing.T) {
	s, file, p, o := start(t, "")
	o.Progress(plans.StepCopy, 500, 2000, "")
	o.Progress(plans.StepCopy, 1500, 2000, "")
	o.Progress(plans.StepCopy, 1200, 2000, "") // a lower total never lowers a counter
	o.Progress(plans.StepCatchup, 70, 0, "")
	p.State = plans.StateDone
	p.Result.RowsCopied, p.Result.EventsApplied, p.Result.BlackoutMS = 2000, 90, 42
	o.Finish(p)
	s.Plan(p).Finish(p) // the same plan again: counted once
	fams := closeAndRead(t, s, file)
	lbl := map[string]string{"plan": p.ID, "operation": "move", "shard": "4"}
	for name, want := range map[string]float64{"shardctl_rows_copied_total": 2000, "shardctl_events_applied_total": 90} {
		fam := fams[name]
		if fam == nil || fam.GetType() != dto.MetricType_COUNTER {
			t.Errorf("%s: not a counter: %v", name, fam)
			continue
		}
		if v, _ := value(fams, name, lbl); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	for _, old := range []string{"shardctl_rows_copied", "shardctl_events_applied"} {
		if fams[old] != nil {
			t.Errorf("%s: a count must be a counter named _total", old)
		}
	}
	h := fams["shardctl_blackout_duration_seconds"]
	if h == nil || h.GetType() != dto.MetricType_HISTOGRAM || len(h.Metric) != 1 {
		t.Fatalf("no blackout histogram: %v", h)
	}
	m := h.Metric[0].GetHistogram()
	if m.GetSampleCount() != 1 || m.GetSampleSum() != 0.042 {
		t.Errorf("blackout histogram: %d samples summing to %v, want 1 of 0.042", m.GetSampleCount(), m.GetSampleSum())
	}
	b := m.GetBucket()
	if len(b) < 3 || b[0].GetUpperBound() != 0.001 || b[len(b)-2].GetUpperBound() != 10 {
		t.Errorf("buckets %v: want 1 ms to 10 s (then +Inf)", b)
	}
	for _, bk := range b {
		want := uint64(0)
		if bk.GetUpperBound() >= 0.042 {
			want = 1
		}
		if bk.GetCumulativeCount() != want {
			t.Errorf("bucket le=%v holds %d, want %d", bk.GetUpperBound(), bk.GetCumulativeCount(), want)
		}
	}
}
