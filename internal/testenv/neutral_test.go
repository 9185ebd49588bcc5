package testenv

import "testing"

// The MySQL pass leaves flavor-neutral tests out unless told otherwise; the
// MariaDB pass always runs them, so every test runs in some pass.
func TestFlavorNeutralRunsOncePerSuite(t *testing.T) {
	for _, c := range []struct {
		flavor, every string
		skipped       bool
	}{
		{"", "", false},
		{"mariadb", "", false},
		{"mariadb", "1", false},
		{"mysql", "", true},
		{"mysql", "1", false},
		{"mysql", "0", true},
	} {
		t.Setenv("SHARDCTL_TEST_FLAVOR", c.flavor)
		t.Setenv(EveryFlavorEnv, c.every)
		if got := neutralSkipped(); got != c.skipped {
			t.Errorf("flavor %q, %s=%q: skipped %v, want %v", c.flavor, EveryFlavorEnv, c.every, got, c.skipped)
		}
	}
}
