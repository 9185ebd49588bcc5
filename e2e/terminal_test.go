package e2e

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/testenv"

	"github.com/creack/pty"

	"github.com/shardctl/shardctl/plans"
)

// ptyRun is shardctl in a pseudo-terminal, its output fed to a VT screen.
type ptyRun struct {
	t     *testing.T
	cmd   *exec.Cmd
	tty   *os.File
	mu    sync.Mutex
	vt    *vt
	raw   bytes.Buffer
	check func(screen []string) // called with every screen seen, under mu
	done  chan struct{}         // closed when the output ends
	code  int
}

func (c *cluster) startPTY(cols, rows int, env []string, check func([]string), args ...string) *ptyRun {
	c.t.Helper()
	cmd := c.command(append([]string{"TERM=xterm-256color", "NO_COLOR="}, env...), args...)
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)})
	if err != nil {
		c.t.Fatal(err)
	}
	r := &ptyRun{t: c.t, cmd: cmd, tty: tty, vt: newVT(cols, rows), check: check, done: make(chan struct{})}
	c.t.Cleanup(func() { _ = cmd.Process.Kill(); tty.Close() })
	go func() {
		defer close(r.done)
		buf := make([]byte, 4096)
		for {
			n, err := tty.Read(buf)
			r.mu.Lock()
			r.raw.Write(buf[:n])
			r.vt.Write(buf[:n])
			if r.check != nil && n > 0 {
				r.check(r.vt.lines())
			}
			r.mu.Unlock()
			if err != nil { // EIO once the child is gone
				return
			}
		}
	}()
	return r
}

// wait waits for the process to exit and its output to end, within limit.
func (r *ptyRun) wait(limit time.Duration) int {
	r.t.Helper()
	exited := make(chan error, 1)
	go func() { exited <- r.cmd.Wait() }()
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			r.code = ee.ExitCode()
		}
	case <-time.After(limit):
		_ = r.cmd.Process.Kill()
		r.t.Fatalf("shardctl %v still running after %s; screen:\n%s", r.cmd.Args[1:], limit, r.screen())
	}
	select {
	case <-r.done:
	case <-time.After(5 * time.Second):
		r.tty.Close()
	}
	return r.code
}

// waitScreen waits until the screen shows a line matching re.
func (r *ptyRun) waitScreen(re *regexp.Regexp, limit time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if re.MatchString(r.screen()) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.t.Fatalf("the screen never showed %s; screen:\n%s", re, r.screen())
}

func (r *ptyRun) screen() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.vt.String()
}

// all is the history and the screen.
func (r *ptyRun) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append(append([]string(nil), r.vt.history...), r.vt.lines()...)
}

var (
	midBar    = regexp.MustCompile(`copy +\[=*>? *\] +([1-9]|[1-9][0-9])% +[0-9,]+/~[0-9,]+ rows`)
	logLine   = regexp.MustCompile(`level=|time=`)
	sgrColour = regexp.MustCompile("\x1b\\[[0-9;]*m")
)

// stepLines checks that every step shows once, in order, in lines, with the
// given marker, and returns the index of the last.
func stepLines(t *testing.T, lines []string, marker string) int {
	t.Helper()
	last := -1
	for _, s := range plans.Steps {
		re := regexp.MustCompile(`^ +` + regexp.QuoteMeta(marker) + ` ` + s + ` `)
		var at []int
		for i, l := range lines {
			if re.MatchString(l) {
				at = append(at, i)
			}
		}
		if len(at) != 1 || at[0] < last {
			t.Fatalf("step %s: want one %q line after line %d, found at %v:\n%s", s, marker, last, at, strings.Join(lines, "\n"))
		}
		last = at[0]
	}
	return last
}

// The operator's view of a move under load: one line per step redrawn in
// place, a bar during the copy, the cutover attempt with its blackout, the
// summary below, and no log line on any screen at the default log level.
func TestTerminalStepView(t *testing.T) {
	testenv.FlavorNeutral(t)
	alongside(t)
	const seeded = 1500
	c := newCluster(t, "e2e_term", []int{1}, []int{seeded})
	lp := c.startLoad(100, c.keys("moving", 1, seeded))
	var sawBar bool
	var logSeen string
	check := func(screen []string) {
		for _, l := range screen {
			if midBar.MatchString(l) {
				sawBar = true
			}
			if logSeen == "" && logLine.MatchString(l) {
				logSeen = l
			}
		}
	}
	r := c.startPTY(100, 30, nil, check, "move", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes", "--max-rate", "4000", "--max-blackout", "5s")
	code := r.wait(120 * time.Second)
	lp.stop(t)
	screen := r.screen()
	t.Logf("final screen:\n%s", screen)
	if code != 0 {
		t.Fatalf("move: exit %d", code)
	}
	c.checkLedger(lp)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !sawBar {
		t.Error("no screen showed the copy's bar part-way")
	}
	if logSeen != "" {
		t.Errorf("a log line reached the screen: %q", logSeen)
	}
	lines := r.vt.lines()
	last := stepLines(t, lines, "✓")
	if !regexp.MustCompile(`cutover attempt 1: cut over \(blackout [0-9.]+ ms\)`).MatchString(screen) {
		t.Error("the screen does not show the cutover attempt with its blackout")
	}
	sum := strings.Index(screen, ": done\n")
	if sum < 0 || !strings.Contains(screen[sum:], "write blackout") || !strings.Contains(strings.Join(lines[last:], "\n"), ": done") {
		t.Error("the summary is not below the view")
	}
	if !sgrColour.Match(r.raw.Bytes()) {
		t.Error("no colour on a colour terminal")
	}
}

// A narrow, short terminal without colour (50x10, shorter than the view):
// lines cut to 50 columns (never wrapped, never drawn twice),
// no colour codes, log lines kept in --log-file, and with --log-level debug
// printed above one copy of the view.
func TestTerminalNarrowNoColor(t *testing.T) {
	testenv.FlavorNeutral(t)
	c := newCluster(t, "e2e_narrow", []int{1}, []int{200})
	logFile := filepath.Join(c.dir, "shardctl.log")
	r := c.startPTY(50, 10, []string{"NO_COLOR=1"}, nil, "move", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes", "--max-blackout", "5s",
		"--log-file", logFile, "--log-level", "debug")
	if code := r.wait(90 * time.Second); code != 0 {
		t.Fatalf("move: exit %d\n%s", code, r.screen())
	}
	all := r.all()
	t.Logf("final screen:\n%s", r.screen())
	if sgrColour.Match(r.raw.Bytes()) {
		t.Error("colour codes with NO_COLOR set")
	}
	// Every view line fits: a wrapped one would leave its tail on the next
	// line; and a view taller than the screen would leave copies in the history.
	stepLines(t, all, "✓")
	titles := 0
	for _, l := range all {
		if strings.HasPrefix(l, "move shard 1") && strings.HasSuffix(l, "…") {
			titles++
		}
	}
	if titles > 1 {
		t.Errorf("the view's title shows %d times:\n%s", titles, strings.Join(all, "\n"))
	}
	if !strings.Contains(strings.Join(all, "\n"), "level=INFO") {
		t.Error("--log-level debug printed no log line on the screen")
	}
	if got := readAll(t, logFile); !strings.Contains(got, "step started") || !strings.Contains(got, "level=INFO") {
		t.Errorf("--log-file has no log lines: %q", got)
	}
}

// Off a terminal the output is as before: log lines on stderr, the summary
// on stdout, no view and no escape codes.
func TestOffTerminalOutput(t *testing.T) {
	testenv.FlavorNeutral(t)
	c := newCluster(t, "e2e_offterm", []int{1}, []int{200})
	r := c.mustRun("move", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes", "--max-blackout", "5s")
	if !strings.Contains(r.stdout, ": done") || !strings.Contains(r.stderr, "level=INFO") || !strings.Contains(r.stderr, `msg="step done" step=copy`) {
		t.Errorf("off-terminal output changed:\nstdout: %s\nstderr: %s", r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout+r.stderr, "\x1b[") {
		t.Error("escape codes off a terminal")
	}
}

// plan watch follows a plan applied by another process: Ctrl-C stops
// watching with exit 0 and leaves the plan running; a second watch ends by
// itself when the plan is done, showing every step and the cutover.
func TestPlanWatch(t *testing.T) {
	testenv.FlavorNeutral(t)
	c := newCluster(t, "e2e_watch", []int{1}, []int{300})
	hold := filepath.Join(c.dir, "hold-cutover")
	if err := os.WriteFile(hold, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	planPath := filepath.Join(c.dir, "move.json")
	c.mustRun("move", "--shard", "1", "--to", c.env.Addr(3).String(), "--plan-out", planPath, "--postpone-cutover-file", hold, "--max-blackout", "5s")
	apply := c.start("plan", "apply", planPath)
	fenceRunning := regexp.MustCompile(`(?m)^ +> fence `)

	w1 := c.startPTY(100, 30, nil, nil, "plan", "watch", planPath)
	w1.waitScreen(fenceRunning, 60*time.Second)
	if _, err := w1.tty.Write([]byte{3}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	if code := w1.wait(20 * time.Second); code != 0 {
		t.Fatalf("plan watch after Ctrl-C: exit %d\n%s", code, w1.screen())
	}
	if p, err := plans.Load(planPath); err != nil || p.State != plans.StateRunning {
		t.Fatal("the plan stopped with the watch")
	}

	w2 := c.startPTY(100, 30, nil, nil, "plan", "watch", planPath)
	w2.waitScreen(fenceRunning, 30*time.Second)
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	if code := w2.wait(60 * time.Second); code != 0 {
		t.Fatalf("plan watch: exit %d\n%s", code, w2.screen())
	}
	screen := w2.screen()
	t.Logf("final screen:\n%s", screen)
	stepLines(t, w2.vt.lines(), "✓")
	if !regexp.MustCompile(`cutover attempt 1: cut over \(blackout [0-9.]+ ms\)`).MatchString(screen) || !strings.Contains(screen, ": done") {
		t.Error("the watch does not show the cutover attempt and the end")
	}
	if r := apply.wait(t, 30*time.Second); r.code != 0 {
		t.Fatalf("plan apply: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	// Off a terminal: one line per step, exit 0 on a finished plan.
	r := c.mustRun("plan", "watch", planPath)
	if !strings.Contains(r.stdout, "cleanup done in") || !strings.Contains(r.stdout, "cutover attempt 1: cut over") {
		t.Errorf("plan watch off a terminal: %s", r.stdout)
	}
}
