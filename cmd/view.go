package cmd

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/shardctl/shardctl/plans"
)

// The step view: on a terminal a run shows one line per step, redrawn in
// place, with the cutover attempts under the fence step. The same model
// renders a plan followed from another process ('plan watch').

// viewStep is one step's line.
type viewStep struct {
	name           string
	state          string // pending, running, done, skipped, failed
	started, ended time.Time
	done, total    int64
	est            int64 // expected total where the pipeline reports none (verify, cleanup)
	detail, reason string
	samples        []rateSample
}

type rateSample struct {
	at   time.Time
	done int64
}

// viewModel is what the view shows; pure data, rendered by lines.
type viewModel struct {
	title    string
	footer   string // a line below the steps ('plan watch')
	steps    []*viewStep
	attempts []plans.Attempt
}

func newViewModel(title string) *viewModel {
	m := &viewModel{title: title}
	for _, s := range plans.Steps {
		m.steps = append(m.steps, &viewStep{name: s, state: plans.Pending})
	}
	return m
}

func (m *viewModel) step(name string) *viewStep {
	for _, s := range m.steps {
		if s.name == name {
			return s
		}
	}
	s := &viewStep{name: name, state: plans.Pending}
	m.steps = append(m.steps, s)
	return s
}

// setState records a step's state change at now.
func (m *viewModel) setState(name, state string, now time.Time) {
	s := m.step(name)
	switch state {
	case "started", plans.Running:
		// A resumed step starts again now: its time before a crash is not this run's.
		s.state, s.started, s.ended = plans.Running, now, time.Time{}
	default:
		if name == plans.StepCopy && state == plans.Done {
			m.expect(s.done)
		}
		if s.state == plans.Running || s.ended.IsZero() {
			s.ended = now
		}
		s.state = state
	}
}

// progress records done of total for a step at now (samples feed the recent rate).
func (m *viewModel) progress(name string, done, total int64, detail string, now time.Time) {
	s := m.step(name)
	if done != s.done || len(s.samples) == 0 {
		s.samples = append(s.samples, rateSample{now, done})
	}
	// The rate is over the last 5 s: keep one sample older than that.
	for len(s.samples) > 2 && now.Sub(s.samples[1].at) > 5*time.Second {
		s.samples = s.samples[1:]
	}
	if total <= done && s.est > 0 {
		total = s.est // the pipeline knows no total for this step: use the expected one
	}
	s.done, s.total = done, max(total, done)
	if detail != "" {
		s.detail = detail
	}
}

// expect sets what verify and cleanup will count: the rows copied (the
// statistics would count whole tables where a split moves part of them).
func (m *viewModel) expect(rows int64) {
	if rows > 0 {
		m.step(plans.StepVerify).est = rows
		m.step(plans.StepCleanup).est = rows
	}
}

// rate is rows (or events) per second over the last few seconds.
func (s *viewStep) rate(now time.Time) float64 {
	if len(s.samples) < 2 {
		return 0
	}
	first, last := s.samples[0], s.samples[len(s.samples)-1]
	el := now.Sub(first.at).Seconds()
	if el < 0.2 {
		return 0
	}
	return float64(last.done-first.done) / el
}

// fromPlan sets the model from a plan's record (a resumed run, or 'plan watch').
func (m *viewModel) fromPlan(p *plans.Plan, now time.Time) {
	m.title = p.Summary
	for _, rec := range p.Steps {
		s := m.step(rec.Name)
		s.state, s.started, s.ended = rec.State, rec.Started, rec.Ended
		if rec.Error != "" {
			s.reason = rec.Error
		}
		if rec.State == plans.Running {
			s.detail = rec.Throttled
		}
	}
	var copied, est, deleted int64
	for _, t := range p.Copy {
		est += t.EstRows
		copied += p.Checkpoints.Copy[t.Name].Rows
	}
	for _, t := range p.Cleanup {
		deleted += p.Checkpoints.Prune[t.Name].Rows
	}
	if p.Done(plans.StepCopy) {
		m.expect(copied)
	} else {
		m.expect(est)
	}
	m.progress(plans.StepCopy, copied, est, "", now)
	if p.Result.EventsApplied > 0 {
		m.progress(plans.StepCatchup, p.Result.EventsApplied, p.Result.EventsApplied, "", now)
	}
	if p.Result.RowsVerified > 0 {
		m.progress(plans.StepVerify, p.Result.RowsVerified, p.Result.RowsVerified, "", now)
	}
	if deleted > 0 || p.Result.RowsDeleted > 0 {
		m.progress(plans.StepCleanup, max(deleted, p.Result.RowsDeleted), 0, "", now)
	}
	m.attempts = append(m.attempts[:0], p.Attempts...)
}

// setAttempt records cutover attempt n (1-based).
func (m *viewModel) setAttempt(n int, a plans.Attempt) {
	for len(m.attempts) < n {
		m.attempts = append(m.attempts, plans.Attempt{})
	}
	m.attempts[n-1] = a
}

// viewStyle is how lines are drawn.
type viewStyle struct {
	color bool
	width int // columns; lines are cut to width-1 so the terminal never wraps
}

const (
	sgrGreen  = "\x1b[32m"
	sgrRed    = "\x1b[31m"
	sgrCyan   = "\x1b[36m"
	sgrYellow = "\x1b[33m"
	sgrDim    = "\x1b[2m"
	sgrBold   = "\x1b[1m"
	sgrReset  = "\x1b[0m"
)

// units names what a step counts.
func units(step string) string {
	switch step {
	case plans.StepCatchup:
		return "row changes"
	default:
		return "rows"
	}
}

// hasETA: steps whose total is known ahead.
func hasETA(step string) bool {
	return step == plans.StepCopy || step == plans.StepVerify || step == plans.StepCleanup
}

// lines renders the model at now.
func (m *viewModel) lines(st viewStyle, now time.Time) []string {
	var out []string
	add := func(sgr, marker, text string) {
		line := cut(marker+" "+text, st.width)
		if st.color && sgr != "" {
			// Colour the marker only: the text stays readable on any theme.
			mk, rest := line[:min(len(marker), len(line))], line[min(len(marker), len(line)):]
			line = sgr + mk + sgrReset + rest
		}
		out = append(out, line)
	}
	if m.title != "" {
		t := cut(m.title, st.width)
		if st.color {
			t = sgrBold + t + sgrReset
		}
		out = append(out, t)
	}
	nameW := 0
	for _, s := range m.steps {
		nameW = max(nameW, len(s.name))
	}
	for _, s := range m.steps {
		name := fmt.Sprintf("%-*s", nameW, s.name)
		switch s.state {
		case plans.Running:
			add(sgrCyan, "  >", name+"  "+runningText(s, now))
		case plans.Done:
			txt := "done in " + fmtDur(s.ended.Sub(s.started))
			if s.done > 0 {
				txt += fmt.Sprintf(", %s %s", count(s.done), units(s.name))
			}
			add(sgrGreen, "  ✓", name+"  "+txt)
		case plans.Skipped:
			add(sgrDim, "  -", name+"  skipped")
		case plans.Failed:
			r := s.reason
			if i := strings.IndexByte(r, '\n'); i >= 0 {
				r = r[:i]
			}
			if r == "" {
				r = "see the message below"
			}
			add(sgrRed, "  ✗", name+"  failed: "+r)
		default:
			add(sgrDim, "  ·", name+"  pending")
		}
		if s.name == plans.StepFence {
			out = append(out, m.attemptLines(st)...)
		}
	}
	if m.footer != "" {
		f := cut(m.footer, st.width)
		if st.color {
			f = sgrDim + f + sgrReset
		}
		out = append(out, f)
	}
	return out
}

// attemptLines are the cutover attempts (the last few) under the fence step.
func (m *viewModel) attemptLines(st viewStyle) []string {
	const show = 5
	var out []string
	from := max(0, len(m.attempts)-show)
	if from > 0 {
		out = append(out, cut(fmt.Sprintf("      … %d earlier cutover attempts", from), st.width))
	}
	for i := from; i < len(m.attempts); i++ {
		a := m.attempts[i]
		res := a.Result
		if j := strings.IndexByte(res, '\n'); j >= 0 {
			res = res[:j]
		}
		txt := fmt.Sprintf("      cutover attempt %d: %s", i+1, res)
		if a.BlackoutM > 0 {
			txt += fmt.Sprintf(" (blackout %.1f ms)", a.BlackoutM)
		}
		line := cut(txt, st.width)
		if st.color && strings.HasPrefix(res, "backed off") {
			line = sgrYellow + line + sgrReset
		}
		out = append(out, line)
		if len(a.Blockers) > 0 { // who held the fenced tables (plan show lists them all)
			b := "        held by " + a.Blockers[0].String()
			if n := len(a.Blockers) - 1; n > 0 {
				b += fmt.Sprintf(" (and %d more)", n)
			}
			out = append(out, cut(b, st.width))
		}
	}
	return out
}

// runningText is a running step's progress: a bar with %, count, recent rate
// and ETA where the total is known; the count and the pipeline's note elsewhere.
func runningText(s *viewStep, now time.Time) string {
	el := "running " + fmtDur(now.Sub(s.started))
	rate := s.rate(now)
	var b strings.Builder
	switch {
	case hasETA(s.name) && s.total > 0:
		frac := min(float64(s.done)/float64(s.total), 1)
		const w = 20
		fill := int(frac * w)
		b.WriteString("[" + strings.Repeat("=", fill))
		if fill < w {
			b.WriteString(">" + strings.Repeat(" ", w-fill-1))
		}
		// Totals come from table statistics (a split's copy counts only the moving rows): marked as estimates.
		fmt.Fprintf(&b, "] %3.0f%%  %s/%s%s %s", frac*100, count(s.done), estMark, count(s.total), units(s.name))
		if rate > 0 {
			fmt.Fprintf(&b, "  %s/s", count(int64(rate)))
			if left := s.total - s.done; left > 0 {
				fmt.Fprintf(&b, "  ETA %s", fmtDur(time.Duration(float64(left)/rate*float64(time.Second))))
			}
		}
	case s.done > 0:
		fmt.Fprintf(&b, "%s  %s %s", el, count(s.done), units(s.name))
		if rate > 0 {
			fmt.Fprintf(&b, "  %s/s", count(int64(rate)))
		}
	default:
		b.WriteString(el)
	}
	if s.detail != "" {
		b.WriteString("  (" + s.detail + ")")
	}
	return b.String()
}

// count prints n with thousands separators.
func count(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return s
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func fmtDur(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

// cut shortens s to fit width columns (one column per rune: the view uses no wide characters).
func cut(s string, width int) string {
	if width <= 1 {
		return s
	}
	max := width - 1
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	n := 0
	for i := range s {
		if n == max-1 {
			return s[:i] + "…"
		}
		n++
	}
	return s
}

// colorOK: NO_COLOR (any value) and TERM=dumb turn colour off.
func colorOK() bool {
	return os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb"
}

// viewWanted: the live view needs a terminal that can move the cursor, and text output.
func (a *app) viewWanted() bool {
	return isTerminal() && !a.jsonOut() && os.Getenv("TERM") != "dumb"
}

// liveView draws a viewModel on a terminal, redrawing it in place.
type liveView struct {
	mu     sync.Mutex
	m      *viewModel
	out    io.Writer
	fd     int
	style  viewStyle
	drawn  int // lines on screen from the last draw
	stopCh chan struct{}
	wg     sync.WaitGroup
}

func newLiveView(out *os.File, m *viewModel) *liveView {
	return &liveView{m: m, out: out, fd: int(out.Fd()), style: viewStyle{color: colorOK()}, stopCh: make(chan struct{})}
}

// start redraws every 200 ms until stop.
func (v *liveView) start() {
	v.draw()
	v.wg.Add(1)
	go func() {
		defer v.wg.Done()
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-v.stopCh:
				return
			case <-t.C:
				v.draw()
			}
		}
	}()
}

// stop draws the final state and leaves it on screen.
func (v *liveView) stop() {
	close(v.stopCh)
	v.wg.Wait()
	v.draw()
}

// update changes the model under the view's lock.
func (v *liveView) update(f func(m *viewModel)) {
	v.mu.Lock()
	f(v.m)
	v.mu.Unlock()
}

// size is the terminal's columns and rows (80x0 when it does not say: no row limit).
func (v *liveView) size() (int, int) {
	if w, h, err := term.GetSize(v.fd); err == nil && w > 0 {
		return w, h
	}
	return 80, 0
}

// erase writes what moves the cursor to the view's first line and clears to the end of the screen.
func (v *liveView) erase(b *bytes.Buffer) {
	if v.drawn > 0 {
		fmt.Fprintf(b, "\r\x1b[%dA", v.drawn)
	}
	b.WriteString("\r\x1b[J")
}

func (v *liveView) draw() {
	v.mu.Lock()
	defer v.mu.Unlock()
	var b bytes.Buffer
	v.erase(&b)
	v.render(&b)
	_, _ = v.out.Write(b.Bytes())
}

// render writes the view at the cursor; the caller holds mu.
func (v *liveView) render(b *bytes.Buffer) {
	st := v.style
	var h int
	st.width, h = v.size()
	ls := v.m.lines(st, time.Now())
	if h > 1 && len(ls) > h-1 {
		// Lines scrolled off the top cannot be redrawn: show the last ones.
		ls = ls[len(ls)-(h-1):]
	}
	for _, l := range ls {
		b.WriteString(l + "\n")
	}
	v.drawn = len(ls)
}

// above prints p (log lines) above the view and redraws the view below it.
func (v *liveView) above(p []byte) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var b bytes.Buffer
	v.erase(&b)
	b.Write(p)
	if len(p) > 0 && p[len(p)-1] != '\n' {
		b.WriteByte('\n')
	}
	v.render(&b)
	_, _ = v.out.Write(b.Bytes())
}

// viewObserver feeds pipeline events into a live view (and the log, which
// keeps them off the screen).
type viewObserver struct {
	a *app
	v *liveView
}

func (o *viewObserver) Step(name, state string) {
	o.v.update(func(m *viewModel) { m.setState(name, state, time.Now()) })
	o.a.log.Info("step "+state, "step", name)
}

func (o *viewObserver) Progress(step string, done, total int64, detail string) {
	o.v.update(func(m *viewModel) { m.progress(step, done, total, detail, time.Now()) })
}

// Throttled shows why the step waits (the log has it too), and clears it when it goes on.
func (o *viewObserver) Throttled(step, reason string) {
	o.v.update(func(m *viewModel) { m.step(step).detail = reason })
}

// ReplicaLag is for metrics; the view shows only why a step waits.
func (o *viewObserver) ReplicaLag(string, time.Duration, bool) {}

func (o *viewObserver) Attempt(n int, a plans.Attempt) {
	o.v.update(func(m *viewModel) { m.setAttempt(n, a) })
}

// Retrying shows, on the failed step, that the run resumes in place and when.
func (o *viewObserver) Retrying(wait, left time.Duration, err error) {
	o.v.update(func(m *viewModel) { m.retrying(wait, left, err) })
}

// retrying notes on the failed step's line that the run resumes after wait.
func (m *viewModel) retrying(wait, left time.Duration, err error) {
	for _, s := range m.steps {
		if s.state == plans.Failed {
			s.reason = fmt.Sprintf("retrying in %s after: %s (retry budget %s left)", wait, reasonOf(err), left.Round(time.Second))
		}
	}
}
