// Package throttle paces chunked work (copy, binlog apply, cleanup, prune)
// on a shard server: a rows/s cap, a ceiling on Threads_running, a ceiling on
// replica lag, and a control file an operator edits while the work goes on.
//
// It fails closed: work never proceeds unmeasured. The source's
// Threads_running that cannot be read returns an error (the source is gone:
// the run stops, a resume continues). A replica's lag is sampled in the
// background; a replica that cannot be read, does not replicate, or was not
// read lately pauses the work, says why, and lets it go on once it is back.
package throttle

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardctl/shardctl/dbutil"
)

// Gauge reads one metric and says why work must wait for it ("" when it
// need not). An error means the metric could not be read: the throttler
// fails closed on it.
type Gauge interface {
	Over(ctx context.Context) (reason string, err error)
}

// Config is what the throttler watches; zero values switch a limit off.
type Config struct {
	MaxRate           int64         // rows per second
	MaxThreadsRunning int           // the source's Threads_running ceiling
	MaxLag            time.Duration // replica lag ceiling (with Replicas)
	Replicas          []string      // HOST:PORT of the replicas whose lag is watched
	Discover          bool          // watch too every replica the source and Target list (Discover)
	// Target, when set, gets the heartbeat too: a watched replica may
	// replicate from the source or from the target.
	Target      *sql.DB
	ControlFile string // re-read every 2 s: max-rate, max-threads-running, pause
	// OnChange, when set, is told each time the reason the work waits
	// changes ("" when it goes on again), from the goroutine that waits.
	OnChange func(reason string)
	// OnLag, when set, is told each replica lag sample (ok false: no lag
	// could be read), from the replica's sampling goroutine.
	OnLag func(replica string, lag time.Duration, ok bool)
}

// Throttler paces the chunked work of a run (copy, apply, cleanup): a rows/s
// cap, a ceiling on the source's Threads_running, a ceiling on replica lag,
// and a control file an operator can edit while the run goes on (in the
// spirit of gh-ost's flag files).
type Throttler struct {
	src      *sql.DB
	replicas []*sql.DB
	lags     []*lagGauge
	beats    *heartbeat
	gauges   []Gauge // replica lag, after Threads_running (whose ceiling the control file changes)
	opts     Config
	creds    dbutil.Creds

	mu          sync.Mutex
	rate        int64
	maxThreads  int
	paused      bool
	next        time.Time // rate limiter: when the next chunk may start
	controlRead time.Time
	checked     time.Time
	reason      string // why it throttles now, "" when it does not
}

// New paces work on src by opts' MaxRate, MaxThreadsRunning, MaxLag (with
// Replicas) and ControlFile. Close it when done.
func New(ctx context.Context, src *sql.DB, opts Config, creds dbutil.Creds) (*Throttler, error) {
	t := &Throttler{src: src, opts: opts, creds: creds, rate: opts.MaxRate, maxThreads: opts.MaxThreadsRunning}
	if err := t.open(ctx); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// open starts sampling the lag of each watched replica. A replica that does
// not answer now is no error: its gauge pauses the work until it does
// (Probe is the check that it answers, for planning).
func (t *Throttler) open(ctx context.Context) error {
	if t.opts.MaxLag <= 0 || len(t.opts.Replicas) == 0 && !t.opts.Discover {
		return nil
	}
	list, err := t.opts.watchList(ctx, t.src)
	if err != nil {
		return err
	}
	if t.beats, err = startHeartbeat(ctx, t.src, t.opts.Target); err != nil {
		return err
	}
	for _, r := range list {
		addr, err := dbutil.ParseAddr(r)
		if err != nil {
			return err
		}
		db, err := dbutil.Pool(addr, t.creds, "")
		if err != nil {
			return fmt.Errorf("replica %s: %w", r, err)
		}
		t.replicas = append(t.replicas, db)
		g := newLagGauge(db, r, t.opts.MaxLag, len(t.beats.dbs) > 0, t.opts.OnLag)
		t.lags = append(t.lags, g)
		t.gauges = append(t.gauges, g)
	}
	return nil
}

// Watched is a replica a run watches and the side it replicates from.
type Watched struct {
	Addr string
	Side string // source or target
}

// Probe checks that every replica cfg watches answers, replicates, and
// replicates from src or cfg.Target (a plan is refused rather than made to
// wait on a replica from its start), and says which side each is on.
func Probe(ctx context.Context, src *sql.DB, cfg Config, creds dbutil.Creds) ([]Watched, error) {
	if len(cfg.Replicas) == 0 && !cfg.Discover { // named replicas are checked even before a --max-lag is given (resume may add one)
		return nil, nil
	}
	list, err := cfg.watchList(ctx, src)
	if err != nil {
		return nil, err
	}
	sides := map[int64]string{}
	for _, s := range cfg.sides(src) {
		id, err := serverID(ctx, s.db)
		if err != nil {
			return nil, fmt.Errorf("the %s: %w", s.name, err)
		}
		sides[id] = s.name
	}
	var out []Watched
	for _, r := range list {
		addr, err := dbutil.ParseAddr(r)
		if err != nil {
			return nil, err
		}
		db, err := dbutil.Open(ctx, addr, creds, "")
		if err != nil {
			return nil, fmt.Errorf("replica %s: %w", r, err)
		}
		st, err := ReadReplica(ctx, db)
		db.Close()
		if err != nil {
			return nil, fmt.Errorf("replica %s: %w", r, err)
		}
		side, ok := sides[st.SourceID]
		if !ok {
			return nil, fmt.Errorf("replica %s replicates from server_id %d, which is neither the source nor the target: give a direct replica of either", r, st.SourceID)
		}
		out = append(out, Watched{Addr: r, Side: side})
	}
	return out, nil
}

// Close stops the lag sampling and closes the replica connections.
func (t *Throttler) Close() {
	for _, g := range t.lags {
		g.close()
	}
	t.beats.close()
	for _, db := range t.replicas {
		db.Close()
	}
}

// Reason says why the run is throttled right now ("" when it is not).
func (t *Throttler) Reason() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.reason
}

// Pause is Wait followed by a fixed pause (cleanup's --prune-sleep-ms).
func (t *Throttler) Pause(ctx context.Context, rows int, pause time.Duration) error {
	if err := t.Wait(ctx, rows); err != nil {
		return err
	}
	if pause <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(pause):
		return nil
	}
}

// Wait is called before a chunk of rows rows; it returns when the chunk may go.
func (t *Throttler) Wait(ctx context.Context, rows int) error {
	for {
		t.readControl()
		reason, err := t.overLimit(ctx)
		if err != nil {
			return err
		}
		t.mu.Lock()
		changed := reason != t.reason
		t.reason = reason
		t.mu.Unlock()
		if changed && t.opts.OnChange != nil {
			t.opts.OnChange(reason)
		}
		if reason == "" {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	t.mu.Lock()
	rate := t.rate
	now := time.Now()
	if t.next.Before(now) {
		t.next = now
	}
	wait := t.next.Sub(now)
	if rate > 0 {
		t.next = t.next.Add(time.Duration(float64(time.Second) * float64(rows) / float64(rate)))
	}
	t.mu.Unlock()
	if wait <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(wait):
		return nil
	}
}

// overLimit checks the pause flag, Threads_running and replica lag, at most
// every 250 ms while throttled and every second otherwise.
func (t *Throttler) overLimit(ctx context.Context) (string, error) {
	t.mu.Lock()
	paused, maxThreads := t.paused, t.maxThreads
	last := t.reason
	due := time.Since(t.checked) >= time.Second || last != ""
	if due {
		t.checked = time.Now()
	}
	t.mu.Unlock()
	if paused {
		return "paused by the control file", nil
	}
	if !due {
		return "", nil
	}
	if maxThreads > 0 {
		if reason, err := (threadsGauge{db: t.src, max: maxThreads}).Over(ctx); reason != "" || err != nil {
			return reason, err
		}
	}
	for _, g := range t.gauges {
		if reason, err := g.Over(ctx); reason != "" || err != nil {
			return reason, err
		}
	}
	return "", nil
}

// threadsGauge watches the source's Threads_running.
type threadsGauge struct {
	db  *sql.DB
	max int
}

func (g threadsGauge) Over(ctx context.Context) (string, error) {
	var name string
	var n int
	if err := g.db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Threads_running'").Scan(&name, &n); err != nil {
		return "", fmt.Errorf("throttle: read Threads_running: %w", err)
	}
	if n > g.max {
		return fmt.Sprintf("throttled: Threads_running %d > %d", n, g.max), nil
	}
	return "", nil
}

// readControl re-reads the control file every 2 s: lines "max-rate = N",
// "max-threads-running = N", "pause = true|false"; # starts a comment.
func (t *Throttler) readControl() {
	if t.opts.ControlFile == "" {
		return
	}
	t.mu.Lock()
	if time.Since(t.controlRead) < 2*time.Second {
		t.mu.Unlock()
		return
	}
	t.controlRead = time.Now()
	t.mu.Unlock()
	c, err := parseControl(t.opts.ControlFile)
	if err != nil {
		return // a missing or half-written file keeps the current settings
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := c["max-rate"]; ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			t.rate = n
		}
	}
	if v, ok := c["max-threads-running"]; ok {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			t.maxThreads = n
		}
	}
	if v, ok := c["pause"]; ok {
		t.paused = v == "true" || v == "1" || v == "yes"
	}
}

func parseControl(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		out[strings.ToLower(strings.TrimSpace(k))] = strings.ToLower(strings.TrimSpace(v))
	}
	return out, sc.Err()
}
