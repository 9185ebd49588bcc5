package cmd

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/shardctl/shardctl/pipeline"
	"github.com/shardctl/shardctl/plans"
)

// newLogger builds the run's logger. Off a terminal it is as it always was:
// text lines on stderr. While the step view is on screen, lines below
// warning stay off it unless --log-level is debug (then they print above the
// view); --log-file FILE keeps every line at the chosen level.
func (a *app) newLogger(level slog.Level) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = &screenHandler{Handler: slog.NewTextHandler(logSink{a}, opts), a: a, all: level <= slog.LevelDebug}
	if f := a.v.GetString("log-file"); f != "" {
		file, err := os.OpenFile(f, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, badInput("--log-file %s: %v", f, err)
		}
		// The file lives as long as the process: a command is one run.
		h = slog.NewMultiHandler(h, slog.NewTextHandler(file, opts))
	}
	return slog.New(h), nil
}

// logSink writes log lines above the step view while it is drawn, else to stderr.
type logSink struct{ a *app }

func (s logSink) Write(p []byte) (int, error) {
	if v := s.a.view.Load(); v != nil {
		v.above(p)
		return len(p), nil
	}
	return s.a.errOut.Write(p)
}

// screenHandler drops info lines from the screen while the step view shows
// the same facts (warnings and errors always show).
type screenHandler struct {
	slog.Handler
	a   *app
	all bool
}

func (h *screenHandler) Handle(ctx context.Context, r slog.Record) error {
	if !h.all && r.Level < slog.LevelWarn && h.a.view.Load() != nil {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h *screenHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &screenHandler{Handler: h.Handler.WithAttrs(as), a: h.a, all: h.all}
}

func (h *screenHandler) WithGroup(name string) slog.Handler {
	return &screenHandler{Handler: h.Handler.WithGroup(name), a: h.a, all: h.all}
}

// runObserver is the step view on a terminal, else bars and log lines as before.
func (a *app) runObserver() pipeline.Observer {
	if a.viewWanted() {
		return &viewObserver{a: a, v: newLiveView(os.Stderr, newViewModel(""))}
	}
	return newObserver(a)
}

// startView puts the step view on screen for a run of p (a no-op without
// one); the returned func draws the final state, with err's first line as
// the failed step's reason, and leaves it on screen above the summary.
func (a *app) startView(o pipeline.Observer, p *plans.Plan) func(err error) {
	vo, ok := o.(*viewObserver)
	if !ok {
		return func(error) {}
	}
	vo.v.update(func(m *viewModel) { m.fromPlan(p, time.Now()) })
	vo.v.start()
	a.view.Store(vo.v)
	return func(err error) {
		if err != nil {
			vo.v.update(func(m *viewModel) {
				for _, s := range m.steps {
					if s.state == plans.Failed {
						s.reason = reasonOf(err)
					}
				}
			})
		}
		a.view.Store(nil)
		vo.v.stop()
	}
}

// reasonOf is an error's message without the operation and step prefix the
// view already shows.
func reasonOf(err error) string {
	msg := err.Error()
	for _, s := range plans.Steps {
		if _, after, ok := strings.Cut(msg, ", step "+s+": "); ok {
			return after
		}
	}
	return msg
}
