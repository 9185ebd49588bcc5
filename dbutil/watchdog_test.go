package dbutil

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeServer accepts connections on loopback. The first is the watched
// connection: it is held open, silent, and answered with reply after late
// (0: never). Every later one is a probe: greeted with a few bytes and hung
// up on when greet is set, left silent otherwise.
type fakeServer struct {
	ln     net.Listener
	probes atomic.Int32
}

func newFakeServer(t *testing.T, greet bool, late time.Duration, reply string) *fakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeServer{ln: ln}
	var mu sync.Mutex
	var held []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	go func() {
		first := true
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
			switch {
			case first:
				first = false
				if late > 0 {
					go func() {
						time.Sleep(late)
						_, _ = c.Write([]byte(reply))
					}()
				}
			default:
				s.probes.Add(1)
				if greet {
					// Not a valid greeting: any byte back says the server lives.
					_, _ = c.Write([]byte{0x0a, 0, 0, 0, 0x0a, '5', '.', '5'})
					c.Close()
				}
			}
		}
	}()
	return s
}

func (s *fakeServer) addr() string { return s.ln.Addr().String() }

// probes are the two probes: the greeting's first byte, and the login the
// pools use (with an account no fake server checks).
var probes = []struct {
	name  string
	probe Probe
}{
	{"greeting", GreetProbe},
	{"login", LoginProbe(Config(Addr{Host: "127.0.0.1"}, Creds{User: "probe", Password: "secret", TLS: &TLSOptions{Mode: TLSOff}}, ""))},
}

// A read that nothing answers, on a server whose new connections get no
// greeting either, fails within After + a tick + Probe with ErrUnanswered,
// naming the server; the error a caller of the driver sees is Explain'd.
func TestWatchdogClosesAConnectionNobodyAnswers(t *testing.T) {
	for _, tc := range probes {
		t.Run(tc.name, func(t *testing.T) {
			s := newFakeServer(t, false, 0, "")
			w := NewWatchdog(200*time.Millisecond, 300*time.Millisecond)
			var told atomic.Pointer[Unanswered]
			w.onClose = func(u *Unanswered) { told.Store(u) }
			c, err := w.Dial(context.Background(), "tcp", s.addr(), tc.probe)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second)) // without the watchdog: a timeout, not a hang
			start := time.Now()
			_, err = c.Read(make([]byte, 1))
			took := time.Since(start)
			if !errors.Is(err, ErrUnanswered) {
				t.Fatalf("the read ended with %v after %s, want ErrUnanswered", err, took)
			}
			if bound := 200*time.Millisecond + w.tick + 300*time.Millisecond + time.Second; took > bound {
				t.Errorf("the read failed after %s, want within %s", took, bound)
			}
			var u *Unanswered
			if !errors.As(err, &u) || u.Addr != s.addr() || told.Load() != u {
				t.Fatalf("error %v, told %v: want the server %s named", err, told.Load(), s.addr())
			}
			if s.probes.Load() != 1 {
				t.Errorf("%d probes, want 1", s.probes.Load())
			}
			// The driver says "invalid connection"; a run's failure names the server through Explain.
			if got := explainWith(w, io.ErrUnexpectedEOF); !errors.Is(got, ErrUnanswered) || !errors.Is(got, io.ErrUnexpectedEOF) {
				t.Errorf("Explain: %v", got)
			}
		})
	}
}

// A read of a long statement on a server that greets new connections keeps
// waiting through several probes and gets its answer.
func TestWatchdogWaitsOnAServerThatGreets(t *testing.T) {
	for _, tc := range probes {
		t.Run(tc.name, func(t *testing.T) {
			s := newFakeServer(t, true, 1500*time.Millisecond, "done")
			w := NewWatchdog(200*time.Millisecond, 300*time.Millisecond)
			c, err := w.Dial(context.Background(), "tcp", s.addr(), tc.probe)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			b := make([]byte, 4)
			if _, err := io.ReadFull(c, b); err != nil || string(b) != "done" {
				t.Fatalf("read %q, %v; want the late answer", b, err)
			}
			if n := s.probes.Load(); n < 2 {
				t.Errorf("%d probes during a 1.5 s wait with After 200 ms, want several", n)
			}
		})
	}
}

// A connection with no read or write in progress is never probed however
// long it idles, and the scanner ends with the last connection.
func TestWatchdogLeavesIdleConnectionsAlone(t *testing.T) {
	s := newFakeServer(t, false, 0, "")
	w := NewWatchdog(50*time.Millisecond, 100*time.Millisecond)
	c, err := w.Dial(context.Background(), "tcp", s.addr(), GreetProbe)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	if n := s.probes.Load(); n != 0 {
		t.Fatalf("%d probes of an idle connection", n)
	}
	c.Close()
	deadline := time.Now().Add(2 * time.Second)
	for {
		w.mu.Lock()
		running := w.running
		w.mu.Unlock()
		if !running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the scanner still runs with no connection left")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// With After 0 the dialer returns the plain connection.
func TestWatchdogOff(t *testing.T) {
	s := newFakeServer(t, false, 0, "")
	c, err := NewWatchdog(0, time.Second).Dial(context.Background(), "tcp", s.addr(), GreetProbe)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*net.TCPConn); !ok {
		t.Fatalf("got %T, want the plain *net.TCPConn", c)
	}
}

// explainWith runs Explain with w as the process's watchdog.
func explainWith(w *Watchdog, err error) error {
	old := watchdog.Swap(w)
	defer watchdog.Store(old)
	return Explain(err)
}
