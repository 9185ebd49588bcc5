package dbutil

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Connections are opened without a read timeout (a copy chunk, a checksum or
// an index build may run for minutes), so a server that stops answering for
// good (a stopped process, a path that drops everything, a middlebox that
// black-holes the connection) would hold a read forever. The watchdog ends
// that wait without cutting long statements: a read or write that has waited
// longer than After gets its server probed on a new connection, a full login
// with the same account; any byte back within Probe (the greeting, or an
// error such as too many connections) means the server lives and the wait
// goes on; silence closes the connection, so the wait fails with a lost
// connection, which the retry machinery (--retry-for) treats as transient.
//
// The probe logs in and quits rather than only reading the greeting: a
// client that hangs up in the handshake counts as a connect error on the
// server, and max_connect_errors of those in a row (100 by default) block the
// host, the trap TCP health checks of load balancers fall into; a probe every
// 30 s of an hours-long statement would get there.
//
// Cost: three atomic operations per read or write, and one goroutine per
// Watchdog that scans its connections every After/8 while it has any; a
// probe runs only for a connection stuck past After.

// The watchdog's defaults (settable with SetWatchdog: cmd's hidden flags
// --watchdog-after and --watchdog-probe, which the fault tests shorten).
const (
	DefaultWatchdogAfter = 30 * time.Second
	DefaultWatchdogProbe = 15 * time.Second
)

// TCP keepalive of every connection: a peer whose host or path is gone (no
// ACK at all) fails an idle connection, or one waiting for a long
// statement's answer, in about Idle + Interval*Count, without the watchdog.
var keepAlive = net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 3}

// ErrUnanswered marks a connection the watchdog closed.
var ErrUnanswered = errors.New("the server stopped answering")

// Unanswered is one connection the watchdog closed: which server, how long
// the read or write had waited, how long the probe waited for an answer.
type Unanswered struct {
	Addr   string
	Waited time.Duration
	Probe  time.Duration
	At     time.Time
}

func (u *Unanswered) Error() string {
	return fmt.Sprintf("the server at %s answered nothing for %s, nor a new connection within %s: shardctl closed its connection (check that the server runs and is not stopped or frozen, and the network path from here to it)",
		u.Addr, u.Waited.Round(time.Second), u.Probe.Round(100*time.Millisecond))
}

func (u *Unanswered) Unwrap() error { return ErrUnanswered }

// Watchdog watches the connections its dialer opens.
type Watchdog struct {
	after, probe, tick time.Duration
	onClose            func(*Unanswered) // optional: told of each connection closed

	mu      sync.Mutex
	conns   map[*watchedConn]struct{}
	running bool
	closed  []*Unanswered // recent closes, newest last (Explain)
}

// NewWatchdog returns a watchdog that probes the server of a read or write
// waiting longer than after, and closes the connection when the probe gets
// no answer within probe. after 0 turns it off (Dial only dials).
func NewWatchdog(after, probe time.Duration) *Watchdog {
	return &Watchdog{after: after, probe: probe, tick: max(after/8, 10*time.Millisecond), conns: map[*watchedConn]struct{}{}}
}

var watchdog atomic.Pointer[Watchdog]

func init() { watchdog.Store(NewWatchdog(DefaultWatchdogAfter, DefaultWatchdogProbe)) }

// SetWatchdog sets the watchdog of connections opened from now on (after 0:
// none); onClose, if set, is told of each connection it closes.
func SetWatchdog(after, probe time.Duration, onClose func(*Unanswered)) {
	w := NewWatchdog(after, probe)
	w.onClose = onClose
	watchdog.Store(w)
}

// WatchedDialer is a dialer for go-mysql's clients (the binlog reader) whose
// connections the watchdog probes with a login as creds.
func WatchedDialer(creds Creds) func(ctx context.Context, network, addr string) (net.Conn, error) {
	w := watchdog.Load()
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, _ := net.SplitHostPort(addr)
		cfg := Config(Addr{Host: host}, creds, "")
		return w.Dial(ctx, network, addr, LoginProbe(cfg))
	}
}

// watchConfig gives cfg a dialer whose connections the current watchdog
// probes with cfg's own login.
func watchConfig(cfg *mysql.Config) {
	w := watchdog.Load()
	probe := LoginProbe(cfg.Clone())
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return w.Dial(ctx, network, addr, probe)
	}
}

// A Probe reports whether the server at network/addr answers a new
// connection within ctx.
type Probe func(ctx context.Context, network, addr string) bool

// GreetProbe waits for the first byte of the server's greeting.
func GreetProbe(ctx context.Context, network, addr string) bool {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return false
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetReadDeadline(dl)
	}
	n, _ := c.Read(make([]byte, 1))
	return n > 0
}

// LoginProbe logs in as cfg says and quits: the server answers if it sends
// anything at all (its greeting, an error) within the probe's time.
func LoginProbe(cfg *mysql.Config) Probe {
	return func(ctx context.Context, network, addr string) bool {
		c := cfg.Clone()
		c.Net, c.Addr = network, addr
		var heard atomic.Bool
		c.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			nc, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &heardConn{Conn: nc, heard: &heard}, nil
		}
		conn, err := mysql.NewConnector(c)
		if err != nil {
			return false
		}
		dc, err := conn.Connect(ctx)
		if err == nil {
			_ = dc.Close()
			return true
		}
		return heard.Load()
	}
}

// heardConn notes whether anything was read.
type heardConn struct {
	net.Conn
	heard *atomic.Bool
}

func (c *heardConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.heard.Store(true)
	}
	return n, err
}

// Dial connects to addr with TCP keepalive on and, unless the watchdog is
// off, returns the connection watched, its server probed with probe.
func (w *Watchdog) Dial(ctx context.Context, network, addr string, probe Probe) (net.Conn, error) {
	d := net.Dialer{KeepAliveConfig: keepAlive}
	nc, err := d.DialContext(ctx, network, addr)
	if err != nil || w.after <= 0 {
		return nc, err
	}
	c := &watchedConn{Conn: nc, w: w, network: network, addr: addr, probeFn: probe}
	w.mu.Lock()
	w.conns[c] = struct{}{}
	if !w.running {
		w.running = true
		go w.scan()
	}
	w.mu.Unlock()
	return c, nil
}

// scan runs while the watchdog has connections: each tick it probes the
// server of every connection whose read or write has not moved for After.
func (w *Watchdog) scan() {
	t := time.NewTicker(w.tick)
	defer t.Stop()
	for now := range t.C {
		w.mu.Lock()
		if len(w.conns) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		for c := range w.conns {
			c.check(now)
		}
		w.mu.Unlock()
	}
}

// Probe states of a watched connection.
const (
	probeNone int32 = iota
	probeRunning
	probeAnswered
)

type watchedConn struct {
	net.Conn
	w             *Watchdog
	network, addr string
	probeFn       Probe

	busy   atomic.Int32  // reads and writes in progress
	seq    atomic.Uint64 // reads and writes started
	probe  atomic.Int32
	closed atomic.Pointer[Unanswered]
	once   sync.Once

	// the scanner's own (under w.mu)
	lastSeq uint64
	since   time.Time // when the scanner first saw the current read or write
}

// check runs under w.mu at each tick.
func (c *watchedConn) check(now time.Time) {
	seq := c.seq.Load()
	if c.busy.Load() == 0 || seq != c.lastSeq {
		c.lastSeq, c.since = seq, now
		return
	}
	switch c.probe.Load() {
	case probeAnswered: // alive: wait another After before asking again
		c.since = now
		c.probe.Store(probeNone)
	case probeNone:
		if waited := now.Sub(c.since); waited >= c.w.after {
			c.probe.Store(probeRunning)
			go c.runProbe(seq, waited)
		}
	}
}

func (c *watchedConn) runProbe(seq uint64, waited time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), c.w.probe)
	defer cancel()
	start := time.Now()
	if c.probeFn(ctx, c.network, c.addr) {
		c.probe.Store(probeAnswered)
		return
	}
	if c.busy.Load() == 0 || c.seq.Load() != seq { // it answered meanwhile
		c.probe.Store(probeNone)
		return
	}
	u := &Unanswered{Addr: c.addr, Waited: waited + time.Since(start), Probe: c.w.probe, At: time.Now()}
	c.closed.Store(u)
	c.w.record(u)
	_ = c.Close()
}

// record keeps u for Explain (the last few) and tells onClose.
func (w *Watchdog) record(u *Unanswered) {
	w.mu.Lock()
	w.closed = append(w.closed, u)
	if len(w.closed) > 8 {
		w.closed = w.closed[len(w.closed)-8:]
	}
	w.mu.Unlock()
	if w.onClose != nil {
		w.onClose(u)
	}
}

func (c *watchedConn) Read(b []byte) (int, error)  { return c.watch(c.Conn.Read, b) }
func (c *watchedConn) Write(b []byte) (int, error) { return c.watch(c.Conn.Write, b) }

// watch runs one read or write, marked busy (and moved) for the scan.
func (c *watchedConn) watch(op func([]byte) (int, error), b []byte) (int, error) {
	c.seq.Add(1)
	c.busy.Add(1)
	n, err := op(b)
	c.busy.Add(-1)
	return n, c.why(err)
}

// why is err, said as the watchdog's close when it caused it.
func (c *watchedConn) why(err error) error {
	if err == nil {
		return nil
	}
	if u := c.closed.Load(); u != nil {
		return fmt.Errorf("%w: %w", u, err)
	}
	return err
}

func (c *watchedConn) Close() error {
	c.once.Do(func() {
		c.w.mu.Lock()
		delete(c.w.conns, c)
		c.w.mu.Unlock()
	})
	return c.Conn.Close()
}

// SyscallConn lets the driver check a pooled connection's liveness before
// reuse (it looks for syscall.Conn).
func (c *watchedConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}

// Explain adds to err the connections the watchdog closed in the last ten
// minutes, which name the server and what to check: the driver reports such
// a close as a bare "invalid connection". Callers pass transient failures.
func Explain(err error) error {
	if err == nil || errors.Is(err, ErrUnanswered) {
		return err
	}
	w := watchdog.Load()
	w.mu.Lock()
	var us []error
	seen := map[string]bool{}
	for i := len(w.closed) - 1; i >= 0; i-- {
		u := w.closed[i]
		if time.Since(u.At) < 10*time.Minute && !seen[u.Addr] {
			seen[u.Addr] = true
			us = append(us, u)
		}
	}
	w.mu.Unlock()
	if len(us) == 0 {
		return err
	}
	return &explained{err: err, why: errors.Join(us...)}
}

type explained struct{ err, why error }

func (e *explained) Error() string   { return fmt.Sprintf("%v (%v)", e.err, e.why) }
func (e *explained) Unwrap() []error { return []error{e.err, e.why} }
