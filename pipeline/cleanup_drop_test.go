package pipeline

import (
	"testing"

	"github.com/shardctl/shardctl/dbutil"
)

func TestDropIsCheap(t *testing.T) {
	for _, c := range []struct {
		f    dbutil.Flavor
		want bool
	}{
		{dbutil.Flavor{MySQL: true, Version: "9.7.4-2", Major: 9, Minor: 7}, true},
		{dbutil.Flavor{MySQL: true, Version: "8.4.3", Major: 8, Minor: 4}, true},
		{dbutil.Flavor{MySQL: true, Version: "8.0.23", Major: 8, Minor: 0}, true},
		{dbutil.Flavor{MySQL: true, Version: "8.0.22-log", Major: 8, Minor: 0}, false},
		{dbutil.Flavor{MySQL: true, Version: "5.7.44", Major: 5, Minor: 7}, false},
		{dbutil.Flavor{Version: "10.11.19-MariaDB-0+deb12u1-log", Major: 10, Minor: 11}, true},
		{dbutil.Flavor{Version: "10.6.1-MariaDB", Major: 10, Minor: 6}, true},
		{dbutil.Flavor{Version: "10.5.27-MariaDB", Major: 10, Minor: 5}, false},
		{dbutil.Flavor{Version: "11.4.2-MariaDB", Major: 11, Minor: 4}, true},
	} {
		if got := dropIsCheap(c.f); got != c.want {
			t.Errorf("dropIsCheap(%s) = %v, want %v", c.f, got, c.want)
		}
	}
}

func TestPatchOf(t *testing.T) {
	for v, want := range map[string]int{"8.0.23": 23, "8.0.35-log": 35, "8.0": 0, "10.11.19-MariaDB": 19, "9.7.4-2": 4, "": 0} {
		if got := patchOf(v); got != want {
			t.Errorf("patchOf(%q) = %d, want %d", v, got, want)
		}
	}
}
