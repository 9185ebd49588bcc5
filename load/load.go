// Package load is the write-load generator that proves a move, split or merge
// loses nothing. Run writes single autocommit statements through the router
// while an operation runs and appends every acknowledged write to a ledger;
// Check later verifies every written key at its current shard and on no other.
package load

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/shardctl/shardctl/router"
)

// Table is the sharded table the load writes (the book's employees).
const Table = "employees"

// emp_no is a signed INT.
const (
	minKey = -1 << 31
	maxKey = 1<<31 - 1
)

// Group is a key range [Lo, Hi) the load writes; stats are kept per group.
type Group struct {
	Name   string
	Lo, Hi int64
}

func (g Group) String() string { return fmt.Sprintf("%s=%d-%d", g.Name, g.Lo, g.Hi) }

// Contains reports whether key is in the group's range.
func (g Group) Contains(key int64) bool { return key >= g.Lo && key < g.Hi }

var groupRE = regexp.MustCompile(`^(-?[0-9][0-9_]*)\s*-\s*(-?[0-9][0-9_]*)$`)

// ParseGroup parses "NAME=LO-HI" or "LO-HI" (the name is then the text itself).
func ParseGroup(s string) (Group, error) {
	s = strings.TrimSpace(s)
	name, rng, named := strings.Cut(s, "=")
	name, rng = strings.TrimSpace(name), strings.TrimSpace(rng)
	if !named {
		name, rng = s, s
	}
	bad := func(why string) (Group, error) {
		return Group{}, fmt.Errorf("key group %q: %s (want NAME=LO-HI or LO-HI, for example moving=1-1001)", s, why)
	}
	if s == "" {
		return bad("empty")
	}
	if name == "" {
		return bad("empty name")
	}
	if strings.ContainsAny(name, "=,") || strings.IndexFunc(name, unicode.IsSpace) >= 0 {
		return bad("the name may not contain spaces, '=' or ','")
	}
	m := groupRE.FindStringSubmatch(rng)
	if m == nil {
		return bad("the range is not two integers LO-HI")
	}
	lo, err1 := strconv.ParseInt(strings.ReplaceAll(m[1], "_", ""), 10, 64)
	hi, err2 := strconv.ParseInt(strings.ReplaceAll(m[2], "_", ""), 10, 64)
	if err1 != nil || err2 != nil {
		return bad("a bound is out of range")
	}
	if lo >= hi {
		return bad("LO must be below HI (HI is exclusive)")
	}
	if lo < minKey || hi-1 > maxKey {
		return bad("emp_no is an INT: keys must lie within -2147483648..2147483647")
	}
	return Group{Name: name, Lo: lo, Hi: hi}, nil
}

// ParseGroups parses a comma-separated list of groups.
func ParseGroups(s string) ([]Group, error) {
	var out []Group
	for _, part := range strings.Split(s, ",") {
		g, err := ParseGroup(part)
		if err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, nil
}

// Mix is the relative weight of inserts, updates and deletes.
type Mix struct{ Insert, Update, Delete int }

// DefaultMix is used when Config.Mix is zero.
var DefaultMix = Mix{Insert: 40, Update: 45, Delete: 15}

func (m Mix) String() string { return fmt.Sprintf("%d/%d/%d", m.Insert, m.Update, m.Delete) }

// ParseMix parses "INSERT/UPDATE/DELETE" weights such as "40/45/15".
func ParseMix(s string) (Mix, error) {
	parts := strings.Split(strings.TrimSpace(s), "/")
	if len(parts) != 3 {
		return Mix{}, fmt.Errorf("write mix %q: want INSERT/UPDATE/DELETE weights, for example 40/45/15", s)
	}
	var w [3]int
	for i, p := range parts {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return Mix{}, fmt.Errorf("write mix %q: %q is not a whole number", s, p)
		}
		w[i] = n
	}
	m := Mix{Insert: w[0], Update: w[1], Delete: w[2]}
	return m, m.validate()
}

func (m Mix) validate() error {
	if m.Insert < 0 || m.Update < 0 || m.Delete < 0 || m.Insert+m.Update+m.Delete == 0 {
		return fmt.Errorf("write mix %s: weights must be non-negative and not all zero", m)
	}
	return nil
}

// Config describes a load run.
type Config struct {
	Router *router.Router
	Groups []Group
	// Rate is the target of write transactions per second over all groups
	// (0 = as fast as possible). It is split evenly over the groups so that a
	// stalled group shows as a gap instead of being hidden by the others.
	Rate int
	// Concurrency is the number of workers per group (default 8). Worker w
	// owns the group's keys with key mod Concurrency == w, so the writes to
	// one key are strictly ordered. Groups have their own workers so that a
	// group waiting on an offline mapping never holds up the others.
	Concurrency int
	Duration    time.Duration // stop after this long (0 = until ctx is cancelled)
	Ledger      string        // JSON-lines ledger, created or truncated ("" = keep none)
	Mix         Mix           // zero = DefaultMix
	Seed        int64         // RNG seed
	Progress    func(Stats)   // optional, called about once a second
}

// GroupStats are one group's counters.
type GroupStats struct {
	Acked     int64 // acknowledged writes
	Errors    int64 // writes that finally failed, ambiguous ones included
	Retries   int64 // attempts that met an offline mapping or a moved shard and were retried
	Ambiguous int64 // failed writes whose outcome is unknown (logged as ambiguous)
	// LongestGap is the longest time without an acknowledged write, counting
	// from the start to the first and from the last to the end.
	LongestGap time.Duration
}

// Stats are a run's counters.
type Stats struct {
	Elapsed   time.Duration
	Acked     int64
	Errors    int64
	Retries   int64
	LastError string // the latest failed write's error, for the operator
	Groups    map[string]GroupStats
}

func (s Stats) String() string {
	rate := 0.0
	if s.Elapsed > 0 {
		rate = float64(s.Acked) / s.Elapsed.Seconds()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d acked (%.0f/s), %d errors, %d retries", s.Elapsed.Round(100*time.Millisecond), s.Acked, rate, s.Errors, s.Retries)
	names := make([]string, 0, len(s.Groups))
	for n := range s.Groups {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		g := s.Groups[n]
		fmt.Fprintf(&b, "; %s: %d acked, %d errors, %d retries, longest gap %s", n, g.Acked, g.Errors, g.Retries, g.LongestGap.Round(time.Millisecond))
	}
	return b.String()
}

// grace is how long writes in flight may finish after the run stops, so the
// ledger records their outcome instead of an ambiguity.
const grace = 2 * time.Second

// gateFor bounds the wait for an offline mapping before the write is left
// to Router.Do (which then gives up after its own RetryFor).
const gateFor = 30 * time.Second

func (c Config) withDefaults() (Config, error) {
	if c.Router == nil {
		return c, errors.New("load: no router")
	}
	if len(c.Groups) == 0 {
		return c, errors.New("load: no key groups: give at least one NAME=LO-HI")
	}
	if c.Rate < 0 || c.Concurrency < 0 || c.Duration < 0 {
		return c, errors.New("load: rate, concurrency and duration must not be negative")
	}
	if c.Concurrency == 0 {
		c.Concurrency = 8
	}
	if c.Mix == (Mix{}) {
		c.Mix = DefaultMix
	}
	if err := c.Mix.validate(); err != nil {
		return c, fmt.Errorf("load: %w", err)
	}
	gs := append([]Group(nil), c.Groups...)
	sort.Slice(gs, func(i, j int) bool { return gs[i].Lo < gs[j].Lo })
	names := map[string]bool{}
	for i, g := range gs {
		if g.Name == "" || g.Lo >= g.Hi || g.Lo < minKey || g.Hi-1 > maxKey {
			return c, fmt.Errorf("load: key group %s is invalid (need a name and LO < HI within INT)", g)
		}
		if names[g.Name] {
			return c, fmt.Errorf("load: two key groups are named %q", g.Name)
		}
		names[g.Name] = true
		if i > 0 && g.Lo < gs[i-1].Hi {
			return c, fmt.Errorf("load: key groups %s and %s overlap", gs[i-1], g)
		}
	}
	return c, nil
}

type groupState struct {
	g    Group
	pace *pacer

	acked, errors, retries, ambiguous atomic.Int64

	mu      sync.Mutex
	lastAck time.Time
	longest time.Duration
}

func (gs *groupState) ack(now time.Time) {
	gs.acked.Add(1)
	gs.mu.Lock()
	if d := now.Sub(gs.lastAck); d > gs.longest {
		gs.longest = d
	}
	gs.lastAck = now
	gs.mu.Unlock()
}

func (gs *groupState) stats(now time.Time) GroupStats {
	gs.mu.Lock()
	gap := gs.longest
	if d := now.Sub(gs.lastAck); d > gap {
		gap = d // the gap still open counts too
	}
	gs.mu.Unlock()
	return GroupStats{Acked: gs.acked.Load(), Errors: gs.errors.Load(), Retries: gs.retries.Load(), Ambiguous: gs.ambiguous.Load(), LongestGap: gap}
}

type runner struct {
	cfg    Config
	start  time.Time
	prefix string
	groups []*groupState
	led    *ledger
	seq    atomic.Int64

	stop     chan struct{} // closed when no new writes may start
	stopOnce sync.Once
	wctx     context.Context // writes in flight; cancelled a grace period after stop

	mu      sync.Mutex
	lastErr string
	fatal   error
}

func (r *runner) halt() { r.stopOnce.Do(func() { close(r.stop) }) }

func (r *runner) fail(err error) {
	r.mu.Lock()
	if r.fatal == nil {
		r.fatal = err
	}
	r.mu.Unlock()
	r.halt()
}

func (r *runner) snapshot(now time.Time) Stats {
	s := Stats{Elapsed: now.Sub(r.start), Groups: map[string]GroupStats{}}
	for _, gs := range r.groups {
		g := gs.stats(now)
		s.Groups[gs.g.Name] = g
		s.Acked += g.Acked
		s.Errors += g.Errors
		s.Retries += g.Retries
	}
	r.mu.Lock()
	s.LastError = r.lastErr
	r.mu.Unlock()
	return s
}

// ConfigError is a configuration Run refuses before it writes anything
// (overlapping key groups, …): bad input, not a failure.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// Run writes until cfg.Duration has passed or ctx is cancelled (a normal
// stop). Its error is for bad configuration and ledger I/O; failed writes
// are counted in the stats.
func Run(ctx context.Context, cfg Config) (Stats, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Stats{}, &ConfigError{err}
	}
	m, err := cfg.Router.Map(ctx)
	if err != nil {
		return Stats{}, fmt.Errorf("load: read the shard map: %w", err)
	}
	if _, _, ok := m.TableFunction(Table); !ok {
		return Stats{}, fmt.Errorf("load: table %q is not sharded in the shard map (seed the employees schema first)", Table)
	}
	led, err := createLedger(cfg.Ledger)
	if err != nil {
		return Stats{}, err
	}

	wctx, cancelW := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelW()
	r := &runner{cfg: cfg, led: led, stop: make(chan struct{}), wctx: wctx}
	r.start = time.Now()
	// A per-run token prefix tells this run's values from earlier runs' ones.
	p := strconv.FormatInt(r.start.UnixMilli()%(36*36*36*36), 36)
	r.prefix = strings.Repeat("0", 4-len(p)) + p + "."
	for _, g := range cfg.Groups {
		gs := &groupState{g: g, lastAck: r.start}
		if cfg.Rate > 0 {
			gs.pace = &pacer{interval: time.Duration(float64(time.Second) * float64(len(cfg.Groups)) / float64(cfg.Rate))}
		}
		r.groups = append(r.groups, gs)
	}

	var wg sync.WaitGroup
	for gi, gs := range r.groups {
		for w := 0; w < cfg.Concurrency; w++ {
			rng := rand.New(rand.NewSource(cfg.Seed + int64(gi)*1_000_003 + int64(w)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.worker(gs, w, rng)
			}()
		}
	}
	workersDone := make(chan struct{})
	go func() { wg.Wait(); close(workersDone) }()

	var dur <-chan time.Time
	if cfg.Duration > 0 {
		t := time.NewTimer(cfg.Duration)
		defer t.Stop()
		dur = t.C
	}
	flush := time.NewTicker(100 * time.Millisecond) // the ledger must lag at most 200 ms
	defer flush.Stop()
	progress := time.NewTicker(time.Second)
	defer progress.Stop()
	var graceT *time.Timer
	var graceC <-chan time.Time
	ctxDone, stopC := ctx.Done(), r.stop
	for done := false; !done; {
		select {
		case <-ctxDone:
			ctxDone = nil
			r.halt()
		case <-dur:
			r.halt()
		case <-stopC:
			stopC = nil
			graceT = time.NewTimer(grace)
			graceC = graceT.C
		case <-graceC:
			cancelW() // writes still retrying now end; their outcome is logged
		case <-flush.C:
			if err := led.flush(); err != nil {
				r.fail(err)
			}
		case <-progress.C:
			if cfg.Progress != nil {
				cfg.Progress(r.snapshot(time.Now()))
			}
		case <-workersDone:
			done = true
		}
	}
	if graceT != nil {
		graceT.Stop()
	}
	end := time.Now()
	stats := r.snapshot(end)
	if err := led.close(); err != nil {
		r.fail(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return stats, r.fatal
}

// pacer hands out start times at a fixed interval. A group that fell behind
// (all workers stalled) restarts at the rate instead of bursting to catch up.
type pacer struct {
	mu       sync.Mutex
	interval time.Duration
	next     time.Time
}

func (p *pacer) wait(stop <-chan struct{}) bool {
	p.mu.Lock()
	now := time.Now()
	if p.next.Before(now) {
		p.next = now
	}
	slot := p.next
	p.next = p.next.Add(p.interval)
	p.mu.Unlock()
	d := time.Until(slot)
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-stop:
		return false
	case <-t.C:
		return true
	}
}

// owned describes the keys of g that worker w of n owns: first, first+n, ...
type owned struct{ first, step, count int64 }

func ownedKeys(g Group, w, n int) owned {
	step := int64(n)
	first := g.Lo + ((int64(w)-g.Lo)%step+step)%step
	if first >= g.Hi {
		return owned{}
	}
	return owned{first: first, step: step, count: (g.Hi-first-1)/step + 1}
}

func (o owned) random(rng *rand.Rand) int64 { return o.first + rng.Int63n(o.count)*o.step }

// keySet is a worker's keys believed present, with O(1) random pick and removal.
type keySet struct {
	keys []int64
	idx  map[int64]int
}

func (s *keySet) add(k int64) {
	if _, ok := s.idx[k]; ok {
		return
	}
	s.idx[k] = len(s.keys)
	s.keys = append(s.keys, k)
}

func (s *keySet) remove(k int64) {
	i, ok := s.idx[k]
	if !ok {
		return
	}
	last := s.keys[len(s.keys)-1]
	s.keys[i] = last
	s.idx[last] = i
	s.keys = s.keys[:len(s.keys)-1]
	delete(s.idx, k)
}
