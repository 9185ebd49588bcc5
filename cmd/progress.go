package cmd

import (
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress is a bar on a terminal and a log line every few seconds elsewhere (cron).
type progress struct {
	a     *app
	name  string
	total int64
	bar   *progressbar.ProgressBar
	mu    sync.Mutex
	done  int64
	last  time.Time
	start time.Time
	note  string
}

func isTerminal() bool {
	return term.IsTerminal(int(os.Stdout.Fd())) && term.IsTerminal(int(os.Stderr.Fd()))
}

func (a *app) newProgress(name string, total int64) *progress {
	p := &progress{a: a, name: name, total: total, start: time.Now(), last: time.Now()}
	if isTerminal() && !a.jsonOut() {
		p.bar = progressbar.NewOptions64(total,
			progressbar.OptionSetDescription(name),
			progressbar.OptionSetWriter(os.Stderr),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("rows"),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionClearOnFinish(),
		)
	}
	return p
}

// Note sets a suffix shown with the progress (for example "throttled").
func (p *progress) Note(s string) {
	p.mu.Lock()
	p.note = s
	p.mu.Unlock()
}

func (p *progress) Add(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	if p.bar != nil {
		if p.note != "" {
			p.bar.Describe(p.name + " (" + p.note + ")")
		}
		_ = p.bar.Add64(n)
		return
	}
	if time.Since(p.last) >= 5*time.Second {
		p.last = time.Now()
		rate := float64(p.done) / time.Since(p.start).Seconds()
		msg := fmt.Sprintf("%s: %d/%d rows, %.0f rows/s", p.name, p.done, p.total, rate)
		if p.note != "" {
			msg += " (" + p.note + ")"
		}
		p.a.log.Info(msg)
	}
}

func (p *progress) Finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}

// Set moves the progress to done of total, with an optional note.
func (p *progress) Set(done, total int64, note string) {
	p.mu.Lock()
	delta := done - p.done
	if total > p.total {
		p.total = total
		if p.bar != nil {
			p.bar.ChangeMax64(total)
		}
	}
	if note != "" {
		p.note = note
	}
	p.mu.Unlock()
	if delta > 0 {
		p.Add(delta)
	}
}
