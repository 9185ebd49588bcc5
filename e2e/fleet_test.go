package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/planstore"
	"github.com/shardctl/shardctl/sandbox"
)

// hostB is a second operator host: the same sharding database, its own plan directory.
func (c *cluster) hostB() []string { return []string{"--plan-dir", filepath.Join(c.dir, "plans-b")} }

func waitFile(t *testing.T, path, what string, ok func(*plans.Plan) bool) *plans.Plan {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if p, err := plans.Load(path); err == nil && ok(p) {
			return p
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("plan %s never reached: %s", path, what)
	return nil
}

// Two operator hosts, one sharding database: a move killed on host A is
// listed, shown and resumed on host B; while B runs it, A is refused (exit 4)
// although A's own (stale) file says the plan is stopped mid-copy.
func TestPlanResumedFromAnotherHost(t *testing.T) {
	testenv.FlavorNeutral(t)
	c := newCluster(t, "e2e_hosts", []int{1, 1}, []int{1200, 300})
	groups := []string{c.keys("moving", 1, 1200), c.keys("other", 2, 300)}
	before := c.fleetSums(groups)
	hold := filepath.Join(c.dir, "hold")
	os.WriteFile(hold, nil, 0o600)
	lp := c.startLoad(100, groups...)
	r := c.run([]string{"SHARDCTL_FAULT=during:copy"}, "move", "--shard", "1", "--to", c.env.Addr(2).String(), "--yes",
		"--chunk-rows", "500", "--postpone-cutover-file", hold, "--max-blackout", "5s")
	if !r.killed {
		t.Fatalf("not killed: exit %d\n%s", r.code, r.stderr)
	}
	files := planFiles(t, c.planDir)
	if len(files) != 1 {
		t.Fatalf("plan files on host A: %v", files)
	}
	id := strings.TrimSuffix(filepath.Base(files[0]), ".json")

	// Host B sees the plan through the sharding database.
	var list []plans.Entry
	out := c.mustRun(append(c.hostB(), "plan", "list", "-o", "json")...)
	if err := json.Unmarshal([]byte(out.stdout), &list); err != nil || len(list) != 1 || list[0].ID != id || list[0].Step != plans.StepCopy {
		t.Fatalf("host B's plan list: %v %s", err, out.stdout)
	}
	var shown plans.Plan
	out = c.mustRun(append(c.hostB(), "plan", "show", id, "-o", "json")...)
	if err := json.Unmarshal([]byte(out.stdout), &shown); err != nil || shown.ID != id || shown.Checkpoints.Start.IsZero() {
		t.Fatalf("host B's plan show: %v %s", err, out.stdout)
	}

	// B resumes; it holds the shard's lock while the postpone file holds the cutover.
	bg := c.start(append(c.hostB(), "plan", "resume", id)...)
	pathB := filepath.Join(c.dir, "plans-b", id+".json")
	waitFile(t, pathB, "fence step running on host B", func(p *plans.Plan) bool { return p.Step(plans.StepFence).State == plans.Running })
	ra := c.run(nil, "plan", "resume", id)
	if ra.code != 4 {
		t.Fatalf("host A resumed while host B runs the plan: exit %d\n%s", ra.code, ra.stderr)
	}
	os.Remove(hold)
	if rb := bg.wait(t, 90*time.Second); rb.code != 0 {
		t.Fatalf("host B's resume: exit %d\n%s", rb.code, rb.stderr)
	}
	lp.stop(t)
	c.checkLedger(lp)
	if after := c.fleetSums(groups); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("fleet rows differ:\nbefore %v\nafter  %v", before, after)
	}
	// Host A's file is stale; the stored copy is later and wins.
	out = c.mustRun("plan", "show", id, "-o", "json")
	if err := json.Unmarshal([]byte(out.stdout), &shown); err != nil || shown.State != plans.StateDone {
		t.Fatalf("host A's plan show after B finished: %v state %q", err, shown.State)
	}
	stale, _ := plans.Load(files[0])
	if stale.State == plans.StateDone {
		t.Fatal("host A's file was rewritten by host B")
	}
	stored, err := planstore.New(c.store.DB, c.name).Get(ctx, id)
	if err != nil || stored.State != plans.StateDone || stored.Revision <= stale.Revision {
		t.Fatalf("stored copy: %v %+v", err, stored)
	}
}

// A failed write to the sharding database's plans table is logged; the run
// goes on and the plan file is kept.
func TestStoreWriteFailureKeepsTheFile(t *testing.T) {
	testenv.FlavorNeutral(t)
	c := newCluster(t, "e2e_storefail", []int{1}, []int{200})
	r := c.run([]string{"SHARDCTL_FAULT=planstore:put"}, "move", "--shard", "1", "--to", c.env.Addr(2).String(), "--yes", "-o", "json")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "could not store the plan") {
		t.Errorf("the failed store write was not logged:\n%s", r.stderr)
	}
	files := planFiles(t, c.planDir)
	p, err := plans.Load(files[0])
	if err != nil || p.State != plans.StateDone {
		t.Fatalf("plan file: %v %+v", err, p)
	}
	if _, err := planstore.New(c.store.DB, c.name).Get(ctx, p.ID); err == nil {
		t.Fatal("the plan reached the store although every write failed")
	}
}

func parseProm(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("not Prometheus text format: %v\n%s", err, text)
	}
	return fams
}

// gauge is the value of the first series of name that has labels (a gauge or a counter).
func gauge(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		for _, l := range m.Label {
			if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
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

// The hooks of a real run, in order, with their variables; a failing
// before-fence hook postpones the cutover. The metrics file and the HTTP
// endpoint are read with the Prometheus text parser.
func TestHooksAndMetricsOfARun(t *testing.T) {
	testenv.FlavorNeutral(t)
	c := newCluster(t, "e2e_hooks", []int{1, 1}, []int{600, 200})
	hookLog := filepath.Join(c.dir, "hooks.log")
	hold := filepath.Join(c.dir, "hold")
	os.WriteFile(hold, nil, 0o600)
	var args []string
	for _, point := range []string{"plan-start", "before-fence", "after-cutover", "after-cleanup", "on-failure"} {
		body := fmt.Sprintf("#!/bin/sh\necho \"$SHARDCTL_HOOK_POINT $SHARDCTL_STEP $SHARDCTL_PLAN_ID $SHARDCTL_OPERATION $SHARDCTL_SHARD $SHARDCTL_SOURCE $SHARDCTL_TARGET\" >> %s\n(env | grep -ci password || true) >> %s.pw\n", hookLog, hookLog)
		if point == "before-fence" {
			body += fmt.Sprintf("test -e %s && exit 1\n", hold)
		}
		body += "exit 0\n"
		path := filepath.Join(c.dir, point+".sh")
		os.WriteFile(path, []byte(body), 0o755)
		args = append(args, "--hook", point+"="+path)
	}
	ports, err := testenv.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports)
	promFile := filepath.Join(c.dir, "shardctl.prom")
	groups := []string{c.keys("moving", 1, 600)}
	lp := c.startLoad(100, groups...)
	bg := c.start(append(args, "move", "--shard", "1", "--to", c.env.Addr(2).String(), "--yes", "--max-blackout", "5s",
		"--metrics-file", promFile, "--metrics-addr", addr, "-o", "json")...)

	// Postponed: the before-fence hook fails while the hold file exists.
	deadline := time.Now().Add(60 * time.Second)
	for strings.Count(readAll(t, hookLog), "before-fence") < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the before-fence hook did not run repeatedly:\n%s", readAll(t, hookLog))
		}
		time.Sleep(100 * time.Millisecond)
	}
	p := c.currentPlan()
	if p == nil || p.CutOver() || len(p.Attempts) != 0 {
		t.Fatalf("the cutover went ahead while the before-fence hook failed: %+v", p)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	buf := make([]byte, 1<<16)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	resp.Body.Close()
	fams := parseProm(t, b.String())
	lbl := map[string]string{"plan": p.ID, "operation": "move", "shard": "1"}
	if v, ok := gauge(fams, "shardctl_step", map[string]string{"plan": p.ID, "step": "fence"}); !ok || v != 1 {
		t.Errorf("HTTP: step fence = %v (%v)", v, ok)
	}
	if v, _ := gauge(fams, "shardctl_rows_copied_total", lbl); v <= 0 {
		t.Errorf("HTTP: rows copied %v", v)
	}
	os.Remove(hold)
	r := bg.wait(t, 60*time.Second)
	lp.stop(t)
	if r.code != 0 {
		t.Fatalf("move: exit %d\n%s", r.code, r.stderr)
	}
	c.checkLedger(lp)

	var points []string
	for _, line := range strings.Split(strings.TrimSpace(readAll(t, hookLog)), "\n") {
		f := strings.Fields(line)
		want := []string{p.ID, "move", "1", c.env.Addr(1).String() + "/" + c.shards[0].Schema, c.env.Addr(2).String() + "/" + c.shards[0].Schema}
		if len(f) != 7 || fmt.Sprint(f[2:]) != fmt.Sprint(want) {
			t.Errorf("hook variables %q, want point step %v", line, want)
		}
		if len(points) == 0 || points[len(points)-1] != f[0] {
			points = append(points, f[0])
		}
	}
	if fmt.Sprint(points) != "[plan-start before-fence after-cutover after-cleanup]" {
		t.Errorf("hook order: %v", points)
	}
	if pw := strings.TrimSpace(strings.ReplaceAll(readAll(t, hookLog+".pw"), "0\n", "")); pw != "" {
		t.Errorf("a hook saw a password variable: %q", pw)
	}

	var sum moveSummary
	json.Unmarshal([]byte(r.stdout), &sum)
	text, err := os.ReadFile(promFile)
	if err != nil {
		t.Fatal(err)
	}
	fams = parseProm(t, string(text))
	if v, _ := gauge(fams, "shardctl_rows_copied_total", lbl); v != float64(sum.Result.RowsCopied) || v == 0 {
		t.Errorf("file: rows copied %v, the run reported %d", v, sum.Result.RowsCopied)
	}
	if v, _ := gauge(fams, "shardctl_blackout_seconds", lbl); v <= 0 || v != sum.Result.BlackoutMS/1000 {
		t.Errorf("file: blackout %v s, the run reported %v ms", v, sum.Result.BlackoutMS)
	}
	if v, _ := gauge(fams, "shardctl_plan_state", map[string]string{"plan": p.ID, "state": "done"}); v != 1 {
		t.Errorf("file: state done = %v", v)
	}
	if _, ok := gauge(fams, "shardctl_events_applied_total", lbl); !ok {
		t.Error("file: no events_applied_total")
	}
	if h := fams["shardctl_blackout_duration_seconds"]; h == nil || len(h.Metric) != 1 || h.Metric[0].GetHistogram().GetSampleCount() != 1 ||
		h.Metric[0].GetHistogram().GetSampleSum() != sum.Result.BlackoutMS/1000 {
		t.Errorf("file: the blackout histogram does not hold the run's blackout (%v ms): %v", sum.Result.BlackoutMS, h)
	}

	// A failing plan-start hook refuses the run (nothing changes) and on-failure runs.
	os.Remove(hookLog)
	r = c.run(nil, "move", "--shard", "2", "--to", c.env.Addr(2).String(), "--yes", "--hook", "plan-start=/bin/false",
		"--hook", "on-failure="+filepath.Join(c.dir, "on-failure.sh"))
	if r.code != 2 || !strings.Contains(readAll(t, hookLog), "on-failure") {
		t.Fatalf("failing plan-start hook: exit %d, hooks %q\n%s", r.code, readAll(t, hookLog), r.stderr)
	}
	m, _ := c.store.Load(ctx)
	if l, _ := m.Location(2); l.Addr() != c.env.Addr(1) {
		t.Fatal("shard 2 moved although plan-start failed")
	}
	_ = sandbox.ShardedTables
}
