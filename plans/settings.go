package plans

// An operation's settings, declared once: the plan's Options and the table
// (Settings) that cmd registers the move, split, merge and rebalance flags
// from, reads each flag's allowed values from, and uses to let 'plan apply'
// and 'plan resume' change a plan. A new setting is a field here and a row
// in Settings, plus its use.

import (
	"fmt"
	"math"
	"time"
)

// Options tune a run. They live in the plan so a resume runs the same way.
type Options struct {
	ChunkRows      int    `json:"chunk_rows"`               // copy and verify chunk size
	PruneChunkRows int    `json:"prune_chunk_rows"`         // cleanup DELETE ... LIMIT size
	Parallel       int    `json:"parallel"`                 // tables copied at once
	Verify         bool   `json:"verify"`                   // chunked checksums before the fence
	VerifyThreads  int    `json:"verify_threads,omitempty"` // chunks the verify step compares at once (0, in a plan made before it: verify's default)
	LockWaitMS     Millis `json:"lock_wait_ms"`             // fence: how long CREATE TRIGGER may wait for a table's metadata lock
	FenceAttempts  int    `json:"fence_attempts"`           // cutover attempts (each within the blackout budget) before the step gives up
	CatchupMS      Millis `json:"catchup_ms"`               // catch-up is done when the target reaches a fresh source position within this
	PruneSleepMS   Millis `json:"prune_sleep_ms"`           // cleanup: pause between chunks
	MaxRate        int64  `json:"max_rate"`                 // copy and cleanup rows/s cap (0 = none)

	MaxBlackoutMS     Millis   `json:"max_blackout_ms"`               // cutover budget: fence + final catch-up must fit, else back off and retry
	BackoffMS         Millis   `json:"backoff_ms"`                    // first pause after a backed-off cutover attempt (doubles, up to 30 s)
	MaxThreadsRunning int      `json:"max_threads_running,omitempty"` // throttle copy, apply and cleanup while the source runs more threads
	MaxLagMS          Millis   `json:"max_lag_ms,omitempty"`          // throttle while a replica lags more
	Replicas          []string `json:"replicas,omitempty"`            // replicas (HOST:PORT) whose lag --max-lag watches
	ChunkTimeMS       Millis   `json:"chunk_time_ms,omitempty"`       // copy: shrink chunks that take longer to read than this
	PostponeFile      string   `json:"postpone_file,omitempty"`       // the cutover waits while this file exists
	ControlFile       string   `json:"control_file,omitempty"`        // re-read every 2 s: max-rate, max-threads-running, pause
	ReverseWindowS    int64    `json:"reverse_window_s,omitempty"`    // after cutover keep the source fenced and in sync this long (0: no window)
	KillBlockersMS    Millis   `json:"kill_blockers_ms,omitempty"`    // before an attempt, kill sessions holding a fenced table's lock longer than this (0: never)
	OnDDL             string   `json:"on_ddl,omitempty"`              // a schema change of a copied table during the tail: stop (""), apply or ignore
	Cleanup           string   `json:"cleanup,omitempty"`             // a whole-shard cleanup: auto (""), drop (the schema at once) or delete (rows in chunks, then the drop)
	// RouteGraceMS is how long after a switch of the shard map the copy
	// routers were sent away from keeps its rows and its fence, so a router
	// still on its cached map fails on the fence and looks again (0, in a
	// plan made before it: DefaultRouteGrace).
	RouteGraceMS Millis `json:"route_grace_ms,omitempty"`
	// RetryForMS is how long a run that stopped for a reason a resume cures
	// as things are (a server restart, a lost connection or lock) goes on
	// resuming itself before it stops with exit 3 (0, and in a plan made
	// before it: never).
	RetryForMS Millis `json:"retry_for_ms,omitempty"`
}

// Cleanup's choices (Options.Cleanup; "" is CleanupAuto).
const (
	CleanupAuto   = "auto"
	CleanupDrop   = "drop"
	CleanupDelete = "delete"
)

// DefaultRetryFor is RetryForMS's default in a new plan: long enough for a
// server to restart.
const DefaultRetryFor = 2 * time.Minute

// DefaultRouteGrace is RouteGraceMS's default: twice the router's default
// cache TTL (router.Options.TTL, 500 ms).
const DefaultRouteGrace = 1000 * time.Millisecond

// RouteGrace is o.RouteGraceMS, or its default.
func (o Options) RouteGrace() time.Duration {
	if o.RouteGraceMS <= 0 {
		return DefaultRouteGrace
	}
	return o.RouteGraceMS.D()
}

// DefaultOptions are the settings a plan starts with. VerifyThreads: on a
// 2-core machine that runs both servers, two chunks at once hide each
// chunk's round trips behind the other's checksum; more only queue on the
// same cores (docs/verify.md).
func DefaultOptions() Options {
	return Options{ChunkRows: 5000, PruneChunkRows: 1000, Parallel: 4, Verify: true, VerifyThreads: 2, LockWaitMS: 1000, FenceAttempts: 10, CatchupMS: 500,
		MaxBlackoutMS: 1000, BackoffMS: 500, RouteGraceMS: MillisOf(DefaultRouteGrace), RetryForMS: MillisOf(DefaultRetryFor)}
}

// Kind is how a setting's flag maps to its field in Options.
type Kind int

const (
	KindInt     Kind = iota // an int flag, an int field
	KindInt64               // an int64 flag, an int64 field
	KindMillis              // a duration flag, a Millis field
	KindMillisN             // an int flag in milliseconds, a Millis field
	KindSeconds             // a duration flag, an int64 field in whole seconds
	KindString              // a string flag, a string field
	KindStrings             // a repeatable string flag, a []string field
	KindChoice              // a string flag among Choices, a string field ("" for the first choice)
	KindNegated             // a bool flag that sets the bool field false
)

// Unbounded is a Hi without an upper bound.
const Unbounded = math.MaxFloat64

// Setting is one operation setting: its flag (name, help), how the flag
// maps to Options (Kind, Field), the values it allows (Lo..Hi, and 0 when
// Off names what 0 means; durations in nanoseconds; Choices; Addr: each
// value is HOST:PORT, or AddrWord when set), and whether 'plan apply' and 'plan resume' may
// change it in a plan (OnRun).
type Setting struct {
	Flag, Usage string
	Kind        Kind
	Field       func(o *Options) any // the pointer to its field
	Lo, Hi      float64
	Off         string
	Choices     []string
	Addr        bool
	AddrWord    string // a word Addr takes besides HOST:PORT
	OnRun       bool
}

// ReplicasAuto, as --replica, watches every replica the source and the
// target list (throttle.Discover).
const ReplicasAuto = "auto"

// Settings are every operation setting, in the order of the help text.
var Settings = []Setting{
	{Flag: "no-verify", Kind: KindNegated, Field: func(o *Options) any { return &o.Verify },
		Usage: "skip the chunked checksum step before the fence"},
	{Flag: "chunk-rows", Kind: KindInt, Field: func(o *Options) any { return &o.ChunkRows }, Lo: 1, Hi: 1_000_000, OnRun: true,
		Usage: "rows per copy and verify chunk"},
	{Flag: "verify-threads", Kind: KindInt, Field: func(o *Options) any { return &o.VerifyThreads }, Lo: 1, Hi: 64, OnRun: true,
		Usage: "chunks the verify step compares at once, each on its own session on the source and on the target"},
	{Flag: "prune-chunk-rows", Kind: KindInt, Field: func(o *Options) any { return &o.PruneChunkRows }, Lo: 1, Hi: 1_000_000, OnRun: true,
		Usage: "rows per cleanup DELETE ... LIMIT"},
	{Flag: "parallel", Kind: KindInt, Field: func(o *Options) any { return &o.Parallel }, Lo: 1, Hi: 64, OnRun: true,
		Usage: "tables copied at once"},
	{Flag: "max-rate", Kind: KindInt64, Field: func(o *Options) any { return &o.MaxRate }, Lo: 1, Hi: Unbounded, Off: "no limit", OnRun: true,
		Usage: "copy and cleanup rows per second at most (0: no limit)"},
	{Flag: "prune-sleep-ms", Kind: KindMillisN, Field: func(o *Options) any { return &o.PruneSleepMS }, Lo: 0, Hi: 60_000, OnRun: true,
		Usage: "pause between cleanup chunks"},
	{Flag: "max-blackout", Kind: KindMillis, Field: func(o *Options) any { return &o.MaxBlackoutMS }, Lo: float64(10 * time.Millisecond), Hi: float64(time.Hour), OnRun: true,
		Usage: "write blackout budget: a cutover that cannot fence and catch up within it backs off, puts the shard back online, and retries"},
	{Flag: "cutover-attempts", Kind: KindInt, Field: func(o *Options) any { return &o.FenceAttempts }, Lo: 1, Hi: 1000, OnRun: true,
		Usage: "cutover attempts before the fence step gives up (the shard stays online at the source)"},
	{Flag: "cutover-backoff", Kind: KindMillis, Field: func(o *Options) any { return &o.BackoffMS }, Lo: 0, Hi: float64(time.Hour), OnRun: true,
		Usage: "pause after a backed-off cutover attempt (doubles each time)"},
	{Flag: "max-threads-running", Kind: KindInt, Field: func(o *Options) any { return &o.MaxThreadsRunning }, Lo: 1, Hi: 100_000, Off: "off", OnRun: true,
		Usage: "throttle copy, apply and cleanup while the source's Threads_running is above this (0: off)"},
	{Flag: "max-lag", Kind: KindMillis, Field: func(o *Options) any { return &o.MaxLagMS }, Lo: float64(time.Millisecond), Hi: float64(24 * time.Hour), Off: "off", OnRun: true,
		Usage: "throttle while a --replica lags more than this (0: off)"},
	{Flag: "replica", Kind: KindStrings, Field: func(o *Options) any { return &o.Replicas }, Addr: true, AddrWord: ReplicasAuto, OnRun: true,
		Usage: "a replica HOST:PORT of the source or the target whose lag --max-lag watches (repeat for several), or 'auto': every replica the source and the target list"},
	{Flag: "chunk-time", Kind: KindMillis, Field: func(o *Options) any { return &o.ChunkTimeMS }, Lo: float64(time.Millisecond), Hi: float64(time.Hour), Off: "fixed --chunk-rows",
		Usage: "copy: shrink chunks whose read takes longer than this (0: fixed --chunk-rows)"},
	{Flag: "postpone-cutover-file", Kind: KindString, Field: func(o *Options) any { return &o.PostponeFile },
		Usage: "hold the cutover while this file exists (create it before starting; delete it to cut over)"},
	// The window is kept in whole seconds: below 1s there would be none.
	{Flag: "reverse-window", Kind: KindSeconds, Field: func(o *Options) any { return &o.ReverseWindowS }, Lo: float64(time.Second), Hi: float64(7 * 24 * time.Hour), Off: "no window",
		Usage: "after cutover keep the source copy fenced and in sync this long, so 'plan revert' can switch back (0: no window, the source is cleaned up at once)"},
	{Flag: "on-ddl", Kind: KindChoice, Field: func(o *Options) any { return &o.OnDDL }, Choices: []string{"stop", "apply", "ignore"}, OnRun: true,
		Usage: "a schema change of a copied table on the source while the binlog tail runs: stop (the tail stops before it), apply (run it on the target at the same point and go on), ignore (record it and go on)"},
	{Flag: "cleanup", Kind: KindChoice, Field: func(o *Options) any { return &o.Cleanup }, Choices: []string{CleanupAuto, CleanupDrop, CleanupDelete}, OnRun: true,
		Usage: "how a move or merge removes the old copy after the route grace: drop (DROP DATABASE at once), delete (chunked deletes of every row first, then the drop), auto (drop where the server's DROP TABLE does not stall its other sessions: MariaDB 10.6+, MySQL 8.0.23+; delete elsewhere); a split always deletes"},
	{Flag: "kill-blockers", Kind: KindMillis, Field: func(o *Options) any { return &o.KillBlockersMS }, Lo: float64(time.Millisecond), Hi: float64(24 * time.Hour), Off: "never kill", OnRun: true,
		Usage: "before each cutover attempt after the first, kill the sessions that have held a lock on a fenced table longer than this (0: never; the attempt record names them either way)"},
	{Flag: "route-grace", Kind: KindMillis, Field: func(o *Options) any { return &o.RouteGraceMS }, Lo: float64(100 * time.Millisecond), Hi: float64(time.Hour), OnRun: true,
		Usage: "after the shard map switches, keep the old copy's rows and fence this long before cleanup touches them: routers still on their cached map fail on the fence and look again (keep it above the routers' cache TTL; the router's default is 500ms)"},
	{Flag: "retry-for", Kind: KindMillis, Field: func(o *Options) any { return &o.RetryForMS }, Lo: float64(time.Second), Hi: float64(7 * 24 * time.Hour), Off: "no retry", OnRun: true,
		Usage: "when the run stops for a reason a resume cures as things are (a server restart, a lost connection or lock), resume it in place from its last checkpoint, backing off 1s doubling to 15s, for at most this long before stopping with exit 3 (0: stop at once)"},
	{Flag: "control-file", Kind: KindString, Field: func(o *Options) any { return &o.ControlFile },
		Usage: "re-read every 2 s while running: 'max-rate = N', 'max-threads-running = N', 'pause = true'"},
}

// Copy sets s's field of dst to its value in src.
func (s Setting) Copy(dst, src *Options) {
	switch d := s.Field(dst).(type) {
	case *int:
		*d = *s.Field(src).(*int)
	case *int64:
		*d = *s.Field(src).(*int64)
	case *Millis:
		*d = *s.Field(src).(*Millis)
	case *string:
		*d = *s.Field(src).(*string)
	case *[]string:
		*d = *s.Field(src).(*[]string)
	case *bool:
		*d = *s.Field(src).(*bool)
	default:
		panic(fmt.Sprintf("setting %s: field of type %T", s.Flag, d))
	}
}

// Problem names a combination of settings that cannot work, or "".
func (o Options) Problem() string {
	if o.MaxLagMS > 0 && len(o.Replicas) == 0 {
		return "--max-lag needs at least one --replica HOST:PORT whose lag it watches"
	}
	return ""
}
