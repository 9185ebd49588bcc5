package faultproxy

import (
	"bufio"
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// echo starts a line echo server and returns its address.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(l)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func start(t *testing.T) *Proxy {
	t.Helper()
	p, err := New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// ask sends line and reads the echo, within d.
func ask(c net.Conn, r *bufio.Reader, line string, d time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	l, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return l[:len(l)-1], nil
}

func TestForwards(t *testing.T) {
	p := start(t)
	c, r := dial(t, p)
	for _, w := range []string{"a", "bb", "ccc"} {
		if got, err := ask(c, r, w, 2*time.Second); err != nil || got != w {
			t.Fatalf("echo of %q: %q, %v", w, got, err)
		}
	}
	if p.Conns() != 1 {
		t.Fatalf("conns %d, want 1", p.Conns())
	}
}

func TestResetDropsOpenConnectionsOnly(t *testing.T) {
	p := start(t)
	c, r := dial(t, p)
	if _, err := ask(c, r, "x", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Reset()
	_, err := ask(c, r, "y", 2*time.Second)
	if err == nil {
		t.Fatal("the reset connection still answers")
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the reset connection hung instead of failing: %v", err)
	}
	c2, r2 := dial(t, p)
	if got, err := ask(c2, r2, "z", 2*time.Second); err != nil || got != "z" {
		t.Fatalf("a new connection after the reset: %q, %v", got, err)
	}
}

func TestBlackholeHoldsThenDelivers(t *testing.T) {
	p := start(t)
	c, r := dial(t, p)
	if _, err := ask(c, r, "x", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Blackhole(true)
	_, err := ask(c, r, "held", 300*time.Millisecond)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a black-holed connection answered or failed: %v", err)
	}
	// A new connection is accepted by the kernel but never answered.
	c2, r2 := dial(t, p)
	if _, err := ask(c2, r2, "new", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection made into the black hole answered or failed: %v", err)
	}
	p.Blackhole(false)
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if l, err := r.ReadString('\n'); err != nil || l != "held\n" {
		t.Fatalf("after the black hole: %q, %v", l, err)
	}
	_ = c2.SetDeadline(time.Now().Add(2 * time.Second))
	if l, err := r2.ReadString('\n'); err != nil || l != "new\n" {
		t.Fatalf("the new connection after the black hole: %q, %v", l, err)
	}
}

func TestLatency(t *testing.T) {
	p := start(t)
	c, r := dial(t, p)
	p.SetLatency(100 * time.Millisecond)
	began := time.Now()
	if _, err := ask(c, r, "slow", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	// Both directions are delayed: never under two latencies, whatever the load.
	if took := time.Since(began); took < 200*time.Millisecond {
		t.Fatalf("a round trip took %s with 100 ms each way", took)
	}
	p.SetLatency(0)
	if _, err := ask(c, r, "fast", 2*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestCloseEndsHeldConnections(t *testing.T) {
	p, err := New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	c, r := dial(t, p)
	p.Blackhole(true)
	_, _ = c.Write([]byte("x\n"))
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung on a black-holed connection")
	}
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	for {
		if _, err := r.ReadString('\n'); err != nil {
			break
		}
	}
}
