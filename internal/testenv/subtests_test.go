package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// A parent whose subtests all skipped fails when CI is set, and passes
// otherwise or when one subtest ran (a serial one, or a parallel one, whose
// count is taken when it ends). The parent runs in a child process, so
// its failure is observed, not suffered.
func TestSubtestsAllSkippedFailInCI(t *testing.T) {
	if mode := os.Getenv("SHARDCTL_TESTENV_CHILD"); mode != "" {
		s := subtests(t)
		s.Run("a", func(t *testing.T) { t.Skip("no server") })
		s.Run("b", func(t *testing.T) {
			if mode != "one-ran" {
				t.Skip("no server")
			}
		})
		s.RunParallel("c", func(t *testing.T) { t.Skip("no server") })
		s.RunParallel("d", func(t *testing.T) {
			if mode != "parallel-one-ran" {
				t.Skip("no server")
			}
		})
		return
	}
	for _, c := range []struct {
		mode, ci string
		fail     bool
	}{
		{"all-skip", "true", true},
		{"all-skip", "", false},
		{"one-ran", "true", false},
		{"parallel-one-ran", "true", false},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSubtestsAllSkippedFailInCI$", "-test.v")
		cmd.Env = append(os.Environ(), "SHARDCTL_TESTENV_CHILD="+c.mode, "CI="+c.ci)
		out, err := cmd.CombinedOutput()
		if failed := err != nil; failed != c.fail {
			t.Errorf("%s with CI=%q: failed %v, want %v\n%s", c.mode, c.ci, failed, c.fail, out)
		}
		if c.fail && !strings.Contains(string(out), "all 4 subtests skipped") {
			t.Errorf("%s with CI=%q: the failure does not say why\n%s", c.mode, c.ci, out)
		}
	}
}
