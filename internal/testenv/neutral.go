package testenv

import (
	"os"
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

// neutralSkipped reports whether this pass leaves the flavor-neutral tests out.
func neutralSkipped() bool {
	return MySQL() && os.Getenv(EveryFlavorEnv) != "1"
}
