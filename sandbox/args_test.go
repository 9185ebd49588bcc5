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

// Replicas are numbered after the servers, each server's together, and
// their ports count toward the port range.
func TestReplicaNumbering(t *testing.T) {
	c := Config{Dir: "/x", Servers: 3, Replicas: 2, BasePort: 13306}
	if c.ReplicaIndex(1, 1) != 4 || c.ReplicaIndex(3, 2) != 9 || c.total() != 9 {
		t.Fatalf("replica indexes %d %d, total %d", c.ReplicaIndex(1, 1), c.ReplicaIndex(3, 2), c.total())
	}
	for idx, want := range map[int]int{1: 0, 3: 0, 4: 1, 5: 1, 6: 2, 9: 3} {
		if got := c.SourceOf(idx); got != want {
			t.Errorf("SourceOf(%d) = %d, want %d", idx, got, want)
		}
	}
	c.BasePort = 65530
	if c.Validate() == nil {
		t.Error("a sandbox whose replicas run past port 65535 was accepted")
	}
	if (Config{Dir: "/x", Servers: 1, Replicas: MaxReplicas + 1, BasePort: 13306}).Validate() == nil {
		t.Error("too many replicas accepted")
	}
}
