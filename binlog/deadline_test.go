package binlog

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

func pipe(t *testing.T) (*lazyConn, net.Conn) {
	a, b := net.Pipe()
	lc := &lazyConn{Conn: a, stop: make(chan struct{})}
	go lc.tick()
	t.Cleanup(func() { lc.Close(); b.Close() })
	return lc, b
}

// The lazily applied read deadline keeps its meaning: a read that waits past
// it fails with a timeout, and reads of a stream that keeps coming, each
// asking for a deadline shorter than the whole stream, never do.
func TestLazyReadDeadline(t *testing.T) {
	lc, peer := pipe(t)
	go func() {
		for i := 0; i < 24; i++ {
			time.Sleep(100 * time.Millisecond)
			if _, err := peer.Write([]byte{byte(i)}); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 1)
	// Each deadline is 1.5 s, well above the 100 ms between writes so a
	// loaded machine's stalls do not fail it, and below the 2.4 s stream.
	for i := 0; i < 24; i++ {
		lc.SetReadDeadline(time.Now().Add(1500 * time.Millisecond))
		if _, err := lc.Read(buf); err != nil {
			t.Fatalf("read %d of a flowing stream: %v", i, err)
		}
	}
	// The stream stops: the next read times out instead of waiting forever.
	lc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	done := make(chan error, 1)
	go func() { _, err := lc.Read(buf); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a read past its deadline: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a read past its deadline never returned")
	}
	// Lifting the deadline takes effect at once.
	lc.SetReadDeadline(time.Time{})
	go func() { time.Sleep(500 * time.Millisecond); peer.Write([]byte{1}) }()
	if _, err := lc.Read(buf); err != nil {
		t.Fatalf("a read without a deadline: %v", err)
	}
}
