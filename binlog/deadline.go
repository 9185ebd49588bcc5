package binlog

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// go-mysql sets a read deadline before every packet it reads (twice for a
// large one) when a read timeout is configured: a runtime timer change per
// binlog event, about a tenth of the tail's CPU in the catch-up benchmark.
// lazyConn keeps the timeout's meaning (a read that waits longer than it
// fails) at a fraction of the cost: SetReadDeadline only records the
// deadline asked for, and a ticker moves the socket's real deadline to the
// latest one every deadlineTick. While events (or the 1 s heartbeats) flow,
// the real deadline keeps moving ahead; once they stop, it expires at most
// deadlineTick after the one asked for.

const deadlineTick = 250 * time.Millisecond

type lazyConn struct {
	net.Conn
	want    atomic.Int64 // the read deadline asked for, in Unix nanoseconds (0: none)
	applied int64        // the one on the socket (ticker goroutine only)
	stop    chan struct{}
	once    sync.Once
}

// lazyDialer dials with dial and wraps each connection in a lazyConn.
func lazyDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		lc := &lazyConn{Conn: c, stop: make(chan struct{})}
		go lc.tick()
		return lc, nil
	}
}

func (c *lazyConn) tick() {
	t := time.NewTicker(deadlineTick)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			if w := c.want.Load(); w != c.applied {
				c.applied = w
				var at time.Time
				if w != 0 {
					at = time.Unix(0, w)
				}
				_ = c.Conn.SetReadDeadline(at)
			}
		}
	}
}

func (c *lazyConn) SetReadDeadline(t time.Time) error {
	if t.IsZero() {
		c.want.Store(0)
		return c.Conn.SetReadDeadline(t) // lifting a deadline takes effect at once
	}
	c.want.Store(t.UnixNano())
	return nil
}

func (c *lazyConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetWriteDeadline(t)
}

func (c *lazyConn) Close() error {
	c.once.Do(func() { close(c.stop) })
	return c.Conn.Close()
}
