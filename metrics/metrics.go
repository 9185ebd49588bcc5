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
	reg                                   *prometheus.Registry
	rows, events, lag, blackout, finished *prometheus.GaugeVec
	step, state                           *prometheus.GaugeVec
	retry                                 *prometheus.GaugeVec

	file string
	log  *slog.Logger
	ln   net.Listener
	srv  *http.Server
	mu   sync.Mutex // one textfile write at a time
	stop chan struct{}
	wg   sync.WaitGroup
}

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
	s := &Sink{
		reg:      prometheus.NewRegistry(),
		rows:     gv("rows_copied", "Rows copied to the target by the copy step."),
		events:   gv("events_applied", "Binlog row changes applied to the target."),
		lag:      gv("lag_seconds", "How long the target last needed to catch up to a fresh source position."),
		blackout: gv("blackout_seconds", "Write blackout of the cutover."),
		finished: gv("last_update_timestamp_seconds", "When this plan's series last changed (Unix time)."),
		step:     gv("step", "1 for the step running now, 0 for the others.", "step"),
		state:    gv("plan_state", "1 for the plan's current state (new, running, stopped, done, aborted).", "state"),
		retry:    gv("retry_wait_seconds", "While a stopped run waits to resume itself in place (--retry-for): the wait; else 0."),
		file:     file,
		log:      log,
		stop:     make(chan struct{}),
	}
	s.reg.MustRegister(s.rows, s.events, s.lag, s.blackout, s.finished, s.step, s.state, s.retry)
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

// Observer feeds one plan's run into the sink (a pipeline.Observer and LagObserver).
type Observer struct {
	s  *Sink
	lv []string
}

// Plan starts the series of plan p.
func (s *Sink) Plan(p *plans.Plan) *Observer {
	o := &Observer{s: s, lv: []string{p.ID, p.Operation, strconv.Itoa(p.Source.ShardID)}}
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
		o.s.rows.WithLabelValues(o.lv...).Set(float64(done))
	case plans.StepCatchup:
		o.s.events.WithLabelValues(o.lv...).Set(float64(done))
	default:
		return
	}
	o.touch()
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

// Finish records the plan's result and state (after a run, or before one).
func (o *Observer) Finish(p *plans.Plan) {
	r := p.Result
	o.s.rows.WithLabelValues(o.lv...).Set(float64(r.RowsCopied))
	o.s.events.WithLabelValues(o.lv...).Set(float64(r.EventsApplied))
	o.s.blackout.WithLabelValues(o.lv...).Set(r.BlackoutMS / 1000)
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
