// Package metrics publishes a run's progress in Prometheus text format:
// --metrics-file writes node_exporter's textfile-collector file (temp file and
// rename, so the collector never reads half a file) during and after a run,
// which is how cron jobs report; --metrics-addr serves the same registry over
// HTTP for a long run. Every series is labelled by plan, operation and shard.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/shardctl/shardctl/plans"
)

var labels = []string{"plan", "operation", "shard"}

// Sink is one process's registry and its outputs.
type Sink struct {
	reg                              *prometheus.Registry
	rows, events                     *prometheus.CounterVec // counts: only ever go up
	lag, blackout, finished          *prometheus.GaugeVec
	step, state                      *prometheus.GaugeVec
	blackouts                        *prometheus.HistogramVec // every finished cutover's blackout
	throttled, replicaLag, replicaUp *prometheus.GaugeVec
	retry                            *prometheus.GaugeVec

	file string
	log  *slog.Logger
	ln   net.Listener
	srv  *http.Server
	mu   sync.Mutex // one textfile write at a time
	cmu  sync.Mutex
	seen map[string]*counted // by plan ID
	stop chan struct{}
	wg   sync.WaitGroup
}

// BlackoutBuckets are the blackout histogram's upper bounds in seconds: 1 ms
// to 10 s, about three per decade, dense around the default 1 s budget.
var BlackoutBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Interval is how often the textfile is rewritten during a run.
const Interval = 2 * time.Second

// New starts publishing to file and/or addr (either may be empty).
func New(file, addr string, log *slog.Logger) (*Sink, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	gv := func(name, help string, extra ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "shardctl", Name: name, Help: help}, append(append([]string(nil), labels...), extra...))
	}
	cv := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "shardctl", Name: name, Help: help}, labels)
	}
	s := &Sink{
		reg:    prometheus.NewRegistry(),
		rows:   cv("rows_copied_total", "Rows copied to the target by the copy step."),
		events: cv("events_applied_total", "Binlog row changes applied to the target."),
		// Labelled by operation only, so one run of many plans (rebalance
		// --apply) is one distribution, not a histogram per plan.
		blackouts: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "shardctl", Name: "blackout_duration_seconds",
			Help:    "Write blackout of each finished cutover.",
			Buckets: BlackoutBuckets,
		}, []string{"operation"}),
		lag:        gv("lag_seconds", "How long the target last needed to catch up to a fresh source position."),
		blackout:   gv("blackout_seconds", "Write blackout of the cutover."),
		finished:   gv("last_update_timestamp_seconds", "When this plan's series last changed (Unix time)."),
		step:       gv("step", "1 for the step running now, 0 for the others.", "step"),
		state:      gv("plan_state", "1 for the plan's current state (new, running, stopped, done, aborted).", "state"),
		throttled:  gv("throttled", "1 while the running step waits on the throttler (a replica that lags or cannot be read, Threads_running, the control file's pause).", "step"),
		replicaLag: gv("replica_lag_seconds", "A watched replica's lag at its last reading.", "replica"),
		replicaUp:  gv("replica_lag_readable", "1 when a watched replica's lag could be read at its last reading, 0 when not (the work pauses).", "replica"),
		retry:      gv("retry_wait_seconds", "While a stopped run waits to resume itself in place (--retry-for): the wait; else 0."),
		file:       file,
		log:        log,
		seen:       map[string]*counted{},
		stop:       make(chan struct{}),
	}
	s.reg.MustRegister(s.rows, s.events, s.lag, s.blackout, s.finished, s.step, s.state, s.blackouts, s.throttled, s.replicaLag, s.replicaUp, s.retry)
	if addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("--metrics-addr %s: %w", addr, err)
		}
		s.ln = ln
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
		s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Warn("metrics server stopped", "err", err)
			}
		}()
	}
	if file != "" {
		if err := s.Flush(); err != nil {
			s.Close()
			return nil, err
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			t := time.NewTicker(Interval)
			defer t.Stop()
			for {
				select {
				case <-s.stop:
					return
				case <-t.C:
					if err := s.Flush(); err != nil {
						log.Warn("write metrics file", "file", file, "err", err)
					}
				}
			}
		}()
	}
	return s, nil
}

// Addr is the HTTP listener's address ("" without one).
func (s *Sink) Addr() string {
	if s == nil || s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Flush rewrites the textfile now.
func (s *Sink) Flush() error {
	if s == nil || s.file == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := prometheus.WriteToTextfile(s.file, s.reg); err != nil {
		return fmt.Errorf("--metrics-file %s: %w", s.file, err)
	}
	return nil
}

// Close writes the file a last time and stops the HTTP server.
func (s *Sink) Close() error {
	if s == nil {
		return nil
	}
	select {
	case <-s.stop:
		return nil
	default:
		close(s.stop)
	}
	if s.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = s.srv.Shutdown(ctx)
		cancel()
	}
	s.wg.Wait()
	return s.Flush()
}

// Observer feeds one plan's run into the sink (a pipeline.Observer, LagObserver and ThrottleObserver).
type Observer struct {
	s  *Sink
	lv []string
	c  *counted
}

// counted is what the counters of one plan hold: the pipeline reports
// running totals, a counter takes increments. Kept by the sink, so a plan
// observed twice in one process is not counted twice.
type counted struct {
	mu           sync.Mutex
	rows, events int64
	observed     bool // the blackout is in the histogram
}

// Plan starts the series of plan p.
func (s *Sink) Plan(p *plans.Plan) *Observer {
	s.cmu.Lock()
	c := s.seen[p.ID]
	if c == nil {
		c = &counted{}
		s.seen[p.ID] = c
	}
	s.cmu.Unlock()
	o := &Observer{s: s, lv: []string{p.ID, p.Operation, strconv.Itoa(p.Source.ShardID)}, c: c}
	o.Finish(p)
	o.setState(plans.StateRunning)
	return o
}

func (o *Observer) with(extra ...string) []string {
	return append(append([]string(nil), o.lv...), extra...)
}

func (o *Observer) touch() {
	o.s.finished.WithLabelValues(o.lv...).Set(float64(time.Now().UnixMilli()) / 1000)
}

func (o *Observer) setState(state string) {
	for _, st := range []string{plans.StateNew, plans.StateRunning, plans.StateStopped, plans.StateDone, plans.StateAborted} {
		v := 0.0
		if st == state {
			v = 1
		}
		o.s.state.WithLabelValues(o.with(st)...).Set(v)
	}
	o.touch()
}

// Step records a step's start or end.
func (o *Observer) Step(name, state string) {
	for _, st := range plans.Steps {
		v := 0.0
		if st == name && state == "started" {
			v = 1
		}
		o.s.step.WithLabelValues(o.with(st)...).Set(v)
	}
	if state == "failed" {
		o.setState(plans.StateStopped)
	} else if state == "started" {
		o.setState(plans.StateRunning) // again, after a retry
		o.s.retry.WithLabelValues(o.lv...).Set(0)
	}
	o.touch()
	if err := o.s.Flush(); err != nil {
		o.s.log.Warn("write metrics file", "err", err)
	}
}

// Progress records rows copied and binlog changes applied.
func (o *Observer) Progress(step string, done, _ int64, _ string) {
	switch step {
	case plans.StepCopy:
		o.count(o.s.rows, &o.c.rows, done)
	case plans.StepCatchup:
		o.count(o.s.events, &o.c.events, done)
	default:
		return
	}
	o.touch()
}

// count raises counter c of this plan from the running total *at to total
// (nothing when total is not above it: a counter never goes down). The
// series exists from the first call, at 0 if need be.
func (o *Observer) count(c *prometheus.CounterVec, at *int64, total int64) {
	o.c.mu.Lock()
	d := max(0, total-*at)
	*at += d
	o.c.mu.Unlock()
	c.WithLabelValues(o.lv...).Add(float64(d))
}

// Retrying records that the stopped run resumes itself after wait; the next
// step's start clears it.
func (o *Observer) Retrying(wait, _ time.Duration, _ error) {
	o.s.retry.WithLabelValues(o.lv...).Set(wait.Seconds())
	o.touch()
	if err := o.s.Flush(); err != nil {
		o.s.log.Warn("write metrics file", "err", err)
	}
}

// Lag records the last catch-up time.
func (o *Observer) Lag(d time.Duration) { o.s.lag.WithLabelValues(o.lv...).Set(d.Seconds()) }

// Throttled records whether the running step waits on the throttler.
func (o *Observer) Throttled(step, reason string) {
	v := 0.0
	if reason != "" {
		v = 1
	}
	o.s.throttled.WithLabelValues(o.with(step)...).Set(v)
	o.touch()
}

// ReplicaLag records one lag reading of a watched replica.
func (o *Observer) ReplicaLag(replica string, lag time.Duration, ok bool) {
	up := 0.0
	if ok {
		up = 1
		o.s.replicaLag.WithLabelValues(o.with(replica)...).Set(lag.Seconds())
	}
	o.s.replicaUp.WithLabelValues(o.with(replica)...).Set(up)
}

// Finish records the plan's result and state (after a run, or before one).
func (o *Observer) Finish(p *plans.Plan) {
	r := p.Result
	o.count(o.s.rows, &o.c.rows, r.RowsCopied)
	o.count(o.s.events, &o.c.events, r.EventsApplied)
	o.s.blackout.WithLabelValues(o.lv...).Set(r.BlackoutMS / 1000)
	o.c.mu.Lock()
	first := p.State == plans.StateDone && r.BlackoutMS > 0 && !o.c.observed
	o.c.observed = o.c.observed || first
	o.c.mu.Unlock()
	if first {
		o.s.blackouts.WithLabelValues(p.Operation).Observe(r.BlackoutMS / 1000)
	}
	o.setState(p.State)
	if p.State != plans.StateRunning {
		for _, st := range plans.Steps {
			o.s.step.WithLabelValues(o.with(st)...).Set(0)
		}
	}
	if err := o.s.Flush(); err != nil {
		o.s.log.Warn("write metrics file", "err", err)
	}
}
