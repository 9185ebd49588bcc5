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

// A neutral test moved to the MySQL pass runs there, and in the MariaDB pass
// only when no MySQL pass runs beside it: every test runs in some pass.
func TestFlavorNeutralInMySQLPassRunsOncePerSuite(t *testing.T) {
	for _, c := range []struct {
		flavor, passes, every string
		skipped               bool
	}{
		{"", "", "", false},
		{"mariadb", "", "", false},
		{"mariadb", "mariadb", "", false},
		{"mariadb", "mariadb,mysql", "", true},
		{"mariadb", "mariadb,mysql", "1", false},
		{"mysql", "mariadb,mysql", "", false},
		{"mysql", "", "", false},
	} {
		t.Setenv("SHARDCTL_TEST_FLAVOR", c.flavor)
		t.Setenv(PassesEnv, c.passes)
		t.Setenv(EveryFlavorEnv, c.every)
		if got := inMySQLPassSkipped(); got != c.skipped {
			t.Errorf("flavor %q, %s=%q, %s=%q: skipped %v, want %v", c.flavor, PassesEnv, c.passes, EveryFlavorEnv, c.every, got, c.skipped)
		}
	}
}
