package e2e

import (
	"cmp"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/faultproxy"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/sandbox"
	"github.com/shardctl/shardctl/shardmap"
)

// faultsEnv runs the whole fault matrix when set to "full"; unset, the
// covering subset runs (every fault and every step at least once).
const faultsEnv = "SHARDCTL_FAULTS"

// The matrix's budgets: the retry budget each cell's move runs with, the
// move's blackout budget, and how long a stall or a black hole lasts.
const (
	faultRetryFor    = 30 * time.Second
	faultMaxBlackout = 2 * time.Second
	faultSpell       = 3 * time.Second
)

// faultStep is where a cell's fault starts: the move is held at point
// (SHARDCTL_FAULT=hold:POINT), the fault begins, and the move is let go into it.
type faultStep struct {
	name, point string
	args        []string
}

var faultSteps = []faultStep{
	{"copy", "during:copy", nil},                                    // the third copy checkpoint
	{"catchup", "after:copy", nil},                                  // the catch-up step's start
	{"verify", "after:catchup", nil},                                // the verify step's start
	{"fence", "fence:installed", nil},                               // inside the blackout, the fence up
	{"cutover", "after:fence", nil},                                 // the fence held, the map not yet switched
	{"cleanup", "during:cleanup", nil},                              // the third cleanup checkpoint
	{"window", "during:window", []string{"--reverse-window", "8s"}}, // the reverse tail running
}

// A fault hits one role: the shard's source, its target, the sharding
// database, or (latency) every path at once.
const (
	roleSource   = "source"
	roleTarget   = "target"
	roleShardmap = "shardmap"
	roleAll      = "all"
)

type faultKind struct {
	name, role, what string // what: crash, stall, reset, blackhole, latency
}

var faultKinds = func() []faultKind {
	var ks []faultKind
	for _, what := range []string{"crash", "stall", "reset", "blackhole"} {
		for _, role := range []string{roleSource, roleTarget, roleShardmap} {
			ks = append(ks, faultKind{role + "-" + what, role, what})
		}
	}
	return append(ks, faultKind{"latency", roleAll, "latency"})
}()

// faultFleet is the matrix's one fleet: a cluster whose every path from
// shardctl (the load's router included) goes through a proxy per server.
// A move's cells move shard 1 between servers 2 and 3, alternating; the
// other operations' cells each seed the fleet afresh.
type faultFleet struct {
	env     *testenv.Env // the matrix's own sandbox (testenv.Own)
	c       *cluster
	proxies map[int]*faultproxy.Proxy
	seeded  string // the operation whose layout the fleet holds; "-": none
	at      int    // the server a move's shard 1 is on
	worst   map[string]worstBlackout
}

// worstBlackout is the longest blackout an operation's cells saw, and where.
type worstBlackout struct {
	ms   float64
	cell string
}

func newFaultFleet(t *testing.T) *faultFleet {
	t.Helper()
	env := testenv.Own(t, 3)
	f := &faultFleet{env: env, proxies: map[int]*faultproxy.Proxy{}, seeded: "-", worst: map[string]worstBlackout{}}
	for i := 1; i <= 3; i++ {
		p, err := faultproxy.New(env.Addr(i).String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		f.proxies[i] = p
	}
	return f
}

// seed (re)builds the cluster in op's layout, every shard reached through
// its server's proxy, and the shard map too.
func (f *faultFleet) seed(t *testing.T, op faultOp) {
	t.Helper()
	var addrs []dbutil.Addr
	for _, s := range op.servers {
		addrs = append(addrs, f.addr(s))
	}
	f.c = newClusterIn(t, f.env, "e2e_faults", addrs, sandbox.SeedConfig{Sizes: op.sizes, List: op.list})
	f.c.via = map[string]int{}
	for i := range f.proxies {
		f.c.via[f.addr(i).String()] = i
	}
	body, err := os.ReadFile(f.c.config)
	if err != nil {
		t.Fatal(err)
	}
	direct := fmt.Sprintf("shardmap: %s/", f.c.env.Addr(1))
	proxied := strings.Replace(string(body), direct, fmt.Sprintf("shardmap: %s/", f.addr(1)), 1)
	if proxied == string(body) {
		t.Fatalf("the config names no shard map at %s:\n%s", f.c.env.Addr(1), body)
	}
	if err := os.WriteFile(f.c.config, []byte(proxied), 0o600); err != nil {
		t.Fatal(err)
	}
	f.seeded, f.at = op.name, op.servers[0]
}

func (f *faultFleet) addr(server int) dbutil.Addr {
	return dbutil.Addr{Host: "127.0.0.1", Port: f.proxies[server].Addr().Port}
}

// TestFaultMatrix: a move of one shard, a split, a merge and a key move
// under the ledger load, each held at a step while a server crashes, stalls,
// or its connections are reset, black-holed or slowed, then let go into the
// fault, which heals within the retry budget. Each cell either finishes by
// itself or stops with exit 3 (leaving the moving keys' shard unfenced and
// online, or saying so with the command that ends it) and finishes on plan
// resume; the ledger is clean, every row at its key's shard and the rows
// the load does not write unchanged, the keys at their target, the plan
// done, its blackout recorded. The covering subset runs unless
// SHARDCTL_FAULTS=full. It crashes and stops servers of a sandbox of its
// own, so it runs beside the other tests (alongside): most of its time is
// waiting for its faults to heal.
func TestFaultMatrix(t *testing.T) {
	st := testenv.NewSubtests(t)
	alongside(t)
	full := os.Getenv(faultsEnv) == "full"
	f := newFaultFleet(t)
	parent := t
	var ran []string
	broken := false
	for _, op := range faultOps {
		for _, step := range faultSteps {
			for _, k := range faultKinds {
				cell := op.cell(step.name, k.name)
				if !full && !slices.Contains(faultSubset, cell) {
					continue
				}
				ok := st.Run(cell, func(t *testing.T) {
					ran = append(ran, cell)
					// A fleet kept from cell to cell (a move's) is the
					// parent's: its cluster outlives the cell. The others'
					// are the cell's, their pools closed with it. A failed
					// cell may have left the fleet in an unknown state.
					if broken || f.seeded != op.name || !op.kept() {
						life := parent
						if !op.kept() {
							life = t
						}
						f.seed(life, op)
					}
					f.cell(t, cell, op, step, k)
				})
				broken = !ok
			}
		}
	}
	mode := "the covering subset (" + faultsEnv + "=full runs all)"
	if full {
		mode = "the full matrix"
	}
	t.Logf("%s: %d cells ran: %s", mode, len(ran), strings.Join(ran, ", "))
	for _, op := range faultOps {
		if w, ok := f.worst[op.name]; ok {
			t.Logf("worst blackout of the %s cells: %.1f ms (%s)", cmp.Or(op.name, "move"), w.ms, w.cell)
		}
	}
}

// cell runs op with the fault k injected at step, and checks what it left.
// Long on purpose: one cell's story, start to checks, read top to bottom.
func (f *faultFleet) cell(t *testing.T, cell string, op faultOp, step faultStep, k faultKind) {
	c := f.c
	c.t = t // the cells share the cluster; its checks report to the running cell
	from, to := 2, 3
	if op.kept() {
		from, to = f.at, 5-f.at
	}
	server := map[string]int{roleSource: from, roleTarget: to, roleShardmap: 1}[k.role]
	before := planFiles(t, c.planDir)
	moving, staying := op.groups(c)
	groups := []string{moving}
	if staying != "" {
		groups = append(groups, staying)
	}
	sums := c.fleetSums(groups)
	lp := c.startLoad(100, groups...)

	args := append(op.args(f, to), "--yes",
		"--max-blackout", faultMaxBlackout.String(), "--retry-for", faultRetryFor.String(),
		"--chunk-rows", "50", "--prune-chunk-rows", "50")
	hold, done, out := startHeld(t, c, step.point, "", append(args, step.args...))

	heal := f.inject(t, k, server)
	t.Cleanup(heal) // a failed cell still leaves the servers up and the paths clear
	began := time.Now()
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	f.last(t, k, server)
	heal()
	spell := time.Since(began)

	code := exitWithin(t, done, 3*time.Minute)
	t.Logf("%s: %s exited %d; the fault lasted %s; retries: %d", cell, args[0], code, spell.Round(100*time.Millisecond), strings.Count(out.String(), "retrying in "))
	path := newPlanFile(t, c.planDir, before)
	movingKey := groupLo(t, moving)
	switch code {
	case 0:
		f.wantUnfenced(t, cell, movingKey, "")
	case 3:
		t.Logf("the output ends:\n%s", lastLines(out.String(), 4))
		f.wantUnfenced(t, cell, movingKey, lastLines(out.String(), 6))
		p, err := plans.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		c.mustRun("plan", "resume", p.ID)
	default:
		t.Fatalf("%s: %s exited %d; want 0, or 3 and a resume:\n%s", cell, args[0], code, out.String())
	}
	lp.stop(t)
	c.checkLedger(lp)
	f.wantUnfenced(t, cell, movingKey, "")
	f.wantKeyAt(t, movingKey, to)
	if staying != "" {
		f.wantKeyAt(t, groupLo(t, staying), op.stayAt)
	}
	c.ownership()
	if after := c.fleetSums(groups); fmt.Sprint(after) != fmt.Sprint(sums) {
		t.Errorf("%s: the rows the load does not write differ:\nbefore %v\nafter  %v", cell, sums, after)
	}
	p, err := plans.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if p.State != plans.StateDone {
		t.Fatalf("the plan is %s, want done", p.State)
	}
	f.at = to
	bo := p.Result.BlackoutMS
	t.Logf("%s: blackout %.1f ms (%d attempts)", cell, bo, len(p.Attempts))
	if bo > f.worst[op.name].ms {
		f.worst[op.name] = worstBlackout{bo, cell}
	}
	// A correctness bound, far above any blackout seen: the budget, the
	// retry budget and the fault itself.
	if limit := faultMaxBlackout + faultRetryFor + spell; bo > float64(limit.Milliseconds()) {
		t.Errorf("%s: blackout %.1f ms, over the budget, the retry budget and the fault (%s)", cell, bo, limit)
	}
}

// waitHeld returns once the move is held at point.
func waitHeld(t *testing.T, hold, point string, done <-chan int, out *syncBuffer) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := os.Stat(hold + ".held"); err == nil {
			return
		}
		select {
		case code := <-done:
			t.Fatalf("the move exited %d before reaching %s:\n%s", code, point, out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the move did not reach %s within 2 minutes", point)
		}
	}
}

// inject starts fault k on server and returns what heals it (safe to call twice).
func (f *faultFleet) inject(t *testing.T, k faultKind, server int) (heal func()) {
	t.Helper()
	cfg := f.c.env.Config
	p := f.proxies[server]
	switch k.what {
	case "crash":
		if err := sandbox.Kill(cfg, server); err != nil {
			t.Fatal(err)
		}
		return func() { upAgain(t, cfg, server) }
	case "stall":
		pid := serverPID(t, cfg, server)
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		return func() { _ = syscall.Kill(pid, syscall.SIGCONT) }
	case "reset":
		p.Reset()
		return func() {}
	case "blackhole":
		p.Blackhole(true)
		return func() { p.Blackhole(false) }
	case "latency":
		for _, q := range f.proxies {
			q.SetLatency(200 * time.Millisecond)
		}
		return func() {
			for _, q := range f.proxies {
				q.SetLatency(0)
			}
		}
	}
	t.Fatalf("no fault %q", k.what)
	return nil
}

// last lets the fault last its spell once the move runs into it: a reset
// resets again once the move has reconnected; a crash waits for the server
// to be down for good before heal starts it.
func (f *faultFleet) last(t *testing.T, k faultKind, server int) {
	t.Helper()
	switch k.what {
	case "reset":
		time.Sleep(time.Second)
		f.proxies[server].Reset()
	case "crash":
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if s, _ := sandbox.Status(ctx, f.c.env.Config); len(s) >= server && !s[server-1].Running {
				break
			}
		}
		time.Sleep(time.Second)
	default:
		time.Sleep(faultSpell)
	}
}

// upAgain starts a crashed server of the sandbox cfg (nothing if it runs).
func upAgain(t *testing.T, cfg sandbox.Config, server int) {
	if s, _ := sandbox.Status(ctx, cfg); len(s) >= server && s[server-1].Answers {
		return
	}
	if _, err := sandbox.Up(ctx, cfg); err != nil {
		t.Errorf("start server %d again: %v", server, err)
	}
}

func serverPID(t *testing.T, cfg sandbox.Config, server int) int {
	t.Helper()
	s, err := sandbox.Status(ctx, cfg)
	if err != nil || len(s) < server || s[server-1].PID <= 0 {
		t.Fatalf("server %d's process: %v %+v", server, err, s)
	}
	return s[server-1].PID
}

// newPlanFile is the plan file in dir that was not among before.
func newPlanFile(t *testing.T, dir string, before []string) string {
	t.Helper()
	var fresh []string
	for _, p := range planFiles(t, dir) {
		if !slices.Contains(before, p) {
			fresh = append(fresh, p)
		}
	}
	if len(fresh) != 1 {
		t.Fatalf("want one new plan file in %s, have %v", dir, fresh)
	}
	return fresh[0]
}

// resumeCommand is how an exit message names the command that ends a fence.
var resumeCommand = regexp.MustCompile(`shardctl plan (resume|abort) \S+`)

// wantUnfenced fails the test if the shard the map serves key from is
// fenced there (a source past its cutover stays fenced until its cleanup,
// by design: the map no longer serves the key from it), or if any mapping
// is offline, unless msg (the exit message) says so and names the command
// that ends it ("": nothing may be left).
func (f *faultFleet) wantUnfenced(t *testing.T, cell string, key int64, msg string) {
	t.Helper()
	server, schema := f.serving(t, key)
	left := fencedIn(t, f.c, server, schema)
	m, err := f.c.store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, mp := range m.Mappings {
		if mp.Status == shardmap.Offline {
			left = append(left, fmt.Sprintf("with a mapping offline: %+v", mp))
		}
	}
	if len(left) == 0 {
		return
	}
	if msg == "" {
		t.Fatalf("%s: shardctl exited leaving key %d's shard %s", cell, key, strings.Join(left, "; "))
	}
	said := strings.Contains(msg, "fence") || strings.Contains(msg, "offline")
	if !said || !resumeCommand.MatchString(msg) {
		t.Fatalf("%s: shardctl exited 3 leaving key %d's shard %s, and its message does not say so with the command that ends it:\n%s", cell, key, strings.Join(left, "; "), msg)
	}
	t.Logf("%s: left %s, as the exit message says", cell, strings.Join(left, "; "))
}

// serving is the server (by its proxy) and schema the map serves key from.
func (f *faultFleet) serving(t *testing.T, key int64) (int, string) {
	t.Helper()
	m, err := f.c.store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fn, err := m.Function("employees")
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.Lookup(fn, fmt.Sprint(key))
	if err != nil {
		t.Fatalf("lookup %d: %v", key, err)
	}
	for _, server := range []int{2, 3} {
		if res.Location.Addr() == f.addr(server) {
			return server, res.Location.Schema
		}
	}
	t.Fatalf("key %d is at %s, no server's proxy", key, res.Location.Addr())
	return 0, ""
}

// wantKeyAt fails the test unless the map serves key from server's proxy.
func (f *faultFleet) wantKeyAt(t *testing.T, key int64, server int) {
	t.Helper()
	if at, _ := f.serving(t, key); at != server {
		t.Fatalf("key %d is at server %d, want server %d (its proxy %s)", key, at, server, f.addr(server))
	}
}
