package plans

import (
	"fmt"
	"io"
	"time"

	"github.com/shardctl/shardctl/shardmap/mapdef"
)

// StepWindow is the reverse-replication window between cutover and cleanup.
// Only plans made with a window carry this step.
const StepWindow = "window"

// Sides of an operation, as Window.Serving names them.
const (
	SideSource = "source"
	SideTarget = "target"
)

// Window is the reverse-replication window after cutover: the side that does
// not serve is kept fenced against the application and in sync by a tail
// from the serving side, so 'plan revert' can switch back and 'plan complete'
// (or the window's end) runs the cleanup.
type Window struct {
	DurationS int64           `json:"duration_s"`     // how long the window lasts once it starts
	Until     time.Time       `json:"until,omitzero"` // when it ends (set when it starts)
	Serving   string          `json:"serving"`        // SideTarget or SideSource: where the shard map points
	Tail      Position        `json:"tail,omitzero"`  // the window tail's checkpoint in the serving side's binlog
	Revert    []mapdef.Change `json:"revert"`         // point the shard map back at the source (and online)
	Forward   []mapdef.Change `json:"forward"`        // point it at the target again (the plan's cutover)

	// A switch in progress: Final is the serving side's position read behind
	// its fence; Next the other side's position, where the next tail starts.
	Final Position `json:"final,omitzero"`
	Next  Position `json:"next,omitzero"`

	Completing bool      `json:"completing,omitempty"` // complete asked for: the tail stops, cleanup follows
	Ended      time.Time `json:"ended,omitzero"`
	EndReason  string    `json:"end_reason,omitempty"`

	LagMS      float64   `json:"lag_ms"`                // how long the tail last needed to reach the serving side's position
	CaughtUpAt time.Time `json:"caught_up_at,omitzero"` // when it last reached it
	Switches   []Switch  `json:"switches,omitempty"`
	Requests   []Request `json:"requests,omitempty"` // the last requests carried out, newest last
}

// Switch is one completed revert (or forward again).
type Switch struct {
	At         time.Time `json:"at"`
	To         string    `json:"to"` // the side that serves after it
	BlackoutMS float64   `json:"blackout_ms"`
}

// Request is a 'plan revert' or 'plan complete' carried out by the process running the window.
type Request struct {
	ID     string    `json:"id"`
	Action string    `json:"action"` // revert, complete
	At     time.Time `json:"at"`
	Error  string    `json:"error,omitempty"`
}

// InWindow reports a plan that has cut over and whose window has not ended.
func (p *Plan) InWindow() bool {
	return p.Window != nil && p.CutOver() && !p.Done(StepWindow) && p.State != StateAborted && p.State != StateDone
}

// WindowInfo is what listings show of a window.
type WindowInfo struct {
	Active     bool      `json:"active"`
	Serving    string    `json:"serving"`
	Until      time.Time `json:"until,omitzero"`
	LagMS      float64   `json:"lag_ms"`
	CaughtUpAt time.Time `json:"caught_up_at,omitzero"`
	Switches   int       `json:"switches"`
	EndReason  string    `json:"end_reason,omitempty"`
}

// Info summarises the window, or nil without one.
func (w *Window) Info(p *Plan) *WindowInfo {
	if w == nil {
		return nil
	}
	return &WindowInfo{Active: p.InWindow(), Serving: w.Serving, Until: w.Until, LagMS: w.LagMS, CaughtUpAt: w.CaughtUpAt, Switches: len(w.Switches), EndReason: w.EndReason}
}

// PrintWindow renders the window for 'plan show' and 'status'.
func PrintWindow(out io.Writer, p *Plan) {
	w := p.Window
	if w == nil {
		return
	}
	switch {
	case !p.CutOver():
		fmt.Fprintf(out, "\nreverse window: %s after cutover (the source copy stays fenced and in sync; 'shardctl plan revert' switches back)\n", time.Duration(w.DurationS)*time.Second)
		return
	case p.InWindow():
		fmt.Fprintf(out, "\nreverse window: open until %s (%s left); serving: %s; reverse tail lag %.0f ms (caught up %s)\n",
			w.Until.Format(time.RFC3339), time.Until(w.Until).Round(time.Second), w.Serving, w.LagMS, ago(w.CaughtUpAt))
		fmt.Fprintf(out, "  switch: shardctl plan revert %s   finish: shardctl plan complete %s\n", p.ID, p.ID)
	default:
		fmt.Fprintf(out, "\nreverse window: ended %s (%s); served by the %s\n", w.Ended.Format(time.RFC3339), w.EndReason, w.Serving)
	}
	for i, s := range w.Switches {
		fmt.Fprintf(out, "  switch %d: %s to the %s, blackout %.1f ms\n", i+1, s.At.Format(time.RFC3339), s.To, s.BlackoutMS)
	}
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return time.Since(t).Round(time.Second).String() + " ago"
}
