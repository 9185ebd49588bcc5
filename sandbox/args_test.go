package sandbox

import (
	"slices"
	"testing"
)

// TestBufferPoolReachesTheServer: Config.BufferPoolMB is the servers'
// --innodb-buffer-pool-size, and 0 keeps the tests' 256M.
func TestBufferPoolReachesTheServer(t *testing.T) {
	for _, tc := range []struct {
		mb   int
		want string
	}{{0, "--innodb-buffer-pool-size=256M"}, {4096, "--innodb-buffer-pool-size=4096M"}} {
		args := Config{Dir: "/x", Servers: 1, BasePort: 13306, BufferPoolMB: tc.mb}.serverArgs(1, "/x/s1", "p.pid", "bin")
		if !slices.Contains(args, tc.want) {
			t.Errorf("BufferPoolMB %d: server arguments %q lack %s", tc.mb, args, tc.want)
		}
	}
}
