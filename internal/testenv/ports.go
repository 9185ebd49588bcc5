package testenv

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/shardctl/shardctl/sandbox"
)

// Test servers listen below the kernel's ephemeral port range: a port the
// kernel hands out for port 0 is also one it hands to the next outgoing
// connection as its local port, and with hundreds of connections a second
// (two passes, a benchmark beside them) one of them took a port found free
// before the server bound it (TestFailoverResumesByGTID failed so in CI).
// The range below stays clear of the benchmark's sandbox (23406 on).
const portsLow, portsHigh = 25000, 32000

// FreePorts finds n consecutive free loopback ports and returns the first:
// below the ephemeral range where it can (portsLow..portsHigh), else
// where the kernel picks.
func FreePorts(n int) (int, error) {
	lo, hi := portsLow, portsHigh
	if eph := ephemeralLow(); eph > 0 && eph < hi {
		hi = eph
	}
	for attempt := 0; attempt < 50; attempt++ {
		var base int
		if hi-lo > n {
			base = lo + rand.IntN(hi-lo-n)
		} else {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return 0, err
			}
			base = l.Addr().(*net.TCPAddr).Port
			l.Close()
		}
		if base+n > 65535 {
			continue
		}
		ok := true
		for p := base; p < base+n; p++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return base, nil
		}
	}
	return 0, fmt.Errorf("no run of %d free ports found", n)
}

// ephemeralLow is the low end of the kernel's ephemeral port range (0: unknown).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(f[0])
	return n
}

// UpOnFreePorts starts the sandbox cfg(port) describes, port the first of
// servers free ports (FreePorts); a port taken between the search and the
// server's bind (sandbox.ErrPortInUse: another test binary's server) is
// tried again on other ports, up to 3 times, the failed start purged first.
func UpOnFreePorts(ctx context.Context, servers int, cfg func(port int) sandbox.Config) (sandbox.Config, []sandbox.Server, error) {
	for try := 1; ; try++ {
		port, err := FreePorts(servers)
		if err != nil {
			return sandbox.Config{}, nil, err
		}
		c := cfg(port)
		srv, err := sandbox.Up(ctx, c)
		if err == nil || !errors.Is(err, sandbox.ErrPortInUse) || try == 3 {
			return c, srv, err
		}
		fmt.Fprintf(os.Stderr, "testenv: %v; starting the sandbox again on other ports\n", err)
		_ = sandbox.Down(context.Background(), c, true)
	}
}
