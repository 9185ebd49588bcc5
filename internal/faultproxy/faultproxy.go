// Package faultproxy is a TCP proxy for tests that puts network faults
// between a client and one server: every connection reset at once, a black
// hole (bytes neither delivered nor refused, new connections left
// unanswered), and added latency. It exists so the fault matrix can break the
// path from shardctl to one server while the server itself stays healthy.
//
// A black hole holds the bytes rather than dropping them: that is what a
// client sees of a path that drops packets and heals before TCP gives up (the
// peer retransmits), without waiting minutes for the kernel's timers.
package faultproxy

import (
	"net"
	"sync"
	"time"
)

// Proxy forwards the connections made to Addr to the target address.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	conns   map[*link]struct{}
	latency time.Duration
	holed   bool
	healed  chan struct{} // closed when a black hole ends
	closed  bool
	wg      sync.WaitGroup
}

// link is one client connection and its upstream connection.
type link struct {
	client, server net.Conn
}

// New listens on a free loopback port and forwards to target (host:port).
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, conns: map[*link]struct{}{}, healed: make(chan struct{})}
	close(p.healed)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients connect to.
func (p *Proxy) Addr() *net.TCPAddr { return p.ln.Addr().(*net.TCPAddr) }

// Reset closes every open connection with a TCP reset (both sides see it:
// the client a reset, the server a dropped client). New connections work.
func (p *Proxy) Reset() {
	p.mu.Lock()
	ls := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		ls = append(ls, l)
		delete(p.conns, l)
	}
	p.mu.Unlock()
	for _, l := range ls {
		l.abort()
	}
}

// Conns is the number of connections the proxy forwards now.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Blackhole starts (on) or ends a black hole: while it lasts nothing is
// forwarded either way and new connections are accepted but never answered;
// when it ends, what was held flows again.
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on == p.holed {
		return
	}
	p.holed = on
	if on {
		p.healed = make(chan struct{})
	} else {
		close(p.healed)
	}
}

// SetLatency delays every chunk of bytes by d in each direction (0: none).
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// Close stops listening and resets every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	if p.holed {
		p.holed = false
		close(p.healed)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.Reset()
	p.wg.Wait()
	return err
}

// wait blocks while a black hole lasts and returns the latency in force.
func (p *Proxy) wait() time.Duration {
	p.mu.Lock()
	h, d := p.healed, p.latency
	p.mu.Unlock()
	<-h
	return d
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	l := &link{client: c}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = c.Close()
		return
	}
	p.conns[l] = struct{}{}
	p.mu.Unlock()
	p.wait() // a connection made into a black hole is not answered until it ends
	s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		p.drop(l)
		return
	}
	p.mu.Lock()
	_, open := p.conns[l]
	l.server = s
	p.mu.Unlock()
	if !open { // reset while dialling
		l.abort()
		return
	}
	done := make(chan struct{}, 2)
	go func() { p.pipe(s, c); done <- struct{}{} }()
	go func() { p.pipe(c, s); done <- struct{}{} }()
	<-done // one side ended: end both, as a proxy does
	p.drop(l)
	<-done
}

// drop forgets l and closes both of its connections.
func (p *Proxy) drop(l *link) {
	p.mu.Lock()
	delete(p.conns, l)
	p.mu.Unlock()
	l.abort()
}

func (l *link) abort() {
	for _, c := range []net.Conn{l.client, l.server} {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // close with RST, not FIN
		}
		if c != nil {
			_ = c.Close()
		}
	}
}

// chunk is bytes read from one side, with the time they arrived.
type chunk struct {
	b  []byte
	at time.Time
}

// pipe copies from src to dst, each chunk held back by the black hole and
// delayed by the latency in force when it was read.
func (p *Proxy) pipe(dst, src net.Conn) {
	q := make(chan chunk, 64)
	go func() {
		defer close(q)
		// One read buffer, each chunk copied out at its size: a buffer
		// allocated (and zeroed) per read made the proxy's garbage, most
		// of the test process's CPU in the fault tests, for packets of a
		// few hundred bytes.
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{append([]byte(nil), buf[:n]...), time.Now()}
			}
			if err != nil {
				return
			}
		}
	}()
	for ch := range q {
		d := p.wait()
		time.Sleep(time.Until(ch.at.Add(d)))
		if _, err := dst.Write(ch.b); err != nil {
			break
		}
	}
	// One side gone ends the link: closing both ends the readers of both pipes.
	_ = dst.Close()
	_ = src.Close()
	for range q { // let the reader above end
	}
}
