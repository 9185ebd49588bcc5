package testenv

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// EveryFlavorEnv, set to 1, runs the flavor-neutral tests in every
// flavor's pass (FlavorNeutral).
const EveryFlavorEnv = "SHARDCTL_TEST_EVERY_FLAVOR"

// FlavorNeutral marks a test whose subject is shardctl's own logic (input
// checks, plan files, exit codes, hooks and metrics, the step view, doctor,
// the fleet policy, the shard map's interlocks) over SQL that the
// flavor-sensitive tests already run on both flavors. The suite runs it once,
// in the MariaDB pass: on 2 cores a MySQL pass costs about twice the
// MariaDB one, and a second run of such a test proves nothing the first did
// not. The MySQL pass skips it, saying where it runs; EveryFlavorEnv=1 runs
// it there too. A test that reads the binlog, builds DDL, triggers or
// checksums, replicates, or meets a server-specific error is never neutral.
func FlavorNeutral(t testing.TB) {
	t.Helper()
	if neutralSkipped() {
		t.Skipf("flavor-neutral: runs in the MariaDB pass (%s=1 runs it on %s too)", EveryFlavorEnv, Flavor())
	}
}

// PassesEnv is set by scripts/test.sh to the flavors' passes it runs side
// by side ("mariadb,mysql", or "mariadb" without a MySQL pass).
const PassesEnv = "SHARDCTL_TEST_PASSES"

// FlavorNeutralInMySQLPass is FlavorNeutral for a test the suite runs in
// the MySQL pass instead: the MariaDB pass carries every other neutral test
// and is the longer of the two passes that run side by side, so a few of
// its neutral tests move over to even them out. Where no MySQL pass runs
// beside it (go test by hand, SHARDCTL_TEST_MYSQL=0) the test runs in the
// MariaDB pass; EveryFlavorEnv=1 runs it in both.
func FlavorNeutralInMySQLPass(t testing.TB) {
	t.Helper()
	if inMySQLPassSkipped() {
		t.Skipf("flavor-neutral: runs in the MySQL pass beside this one (%s=1 runs it here too)", EveryFlavorEnv)
	}
}

// inMySQLPassSkipped reports whether this pass leaves out the neutral tests
// that run in the MySQL pass.
func inMySQLPassSkipped() bool {
	if MySQL() || os.Getenv(EveryFlavorEnv) == "1" {
		return false
	}
	return slices.Contains(strings.Split(os.Getenv(PassesEnv), ","), "mysql")
}

// neutralSkipped reports whether this pass leaves the flavor-neutral tests out.
func neutralSkipped() bool {
	return MySQL() && os.Getenv(EveryFlavorEnv) != "1"
}

// FlavorNeutralSkips reports whether this pass leaves the flavor-neutral
// tests out, for a test whose neutral part is some of its cases rather than
// a whole subtest (the crash matrix's chains drop their neutral points).
func FlavorNeutralSkips() bool { return neutralSkipped() }
