package testenv

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shardctl/shardctl/sandbox"
)

// staleAfter is the age past which a sandbox no server runs in is an
// earlier binary's leftover: no test binary runs longer (scripts/test.sh
// gives each 35 minutes).
const staleAfter = 2 * time.Hour

// sweepStale removes the sandboxes earlier test binaries left behind: a
// failed run keeps its data directories for inspection and a killed one
// keeps everything, about 1 GB a sandbox (the redo logs are preallocated).
// Left alone they filled a developer machine's disk after a day of runs, and
// the next run's servers failed with ENOSPC. It looks at the test sandboxes
// under tmp (shardctl-test-*) and at their server homes inside the roots'
// sb directories (MySQL's, MariaDB 11.8's), and removes what is older than
// staleAfter and holds no pid file of a live process. It returns what it
// removed.
func sweepStale(tmp string, sbs []string, now time.Time) []string {
	var cands []string
	if m, err := filepath.Glob(filepath.Join(tmp, "shardctl-test-*")); err == nil {
		cands = append(cands, m...)
	}
	for _, sb := range sbs {
		ents, err := os.ReadDir(sb)
		if err != nil {
			continue
		}
		for _, e := range ents {
			// the homes of the tests' sandboxes (shardctl-test-*) and of
			// the tests' own servers (t.TempDir: /tmp/TestName…); an
			// operator's 'sandbox up' elsewhere is not the tests' to remove
			if e.IsDir() && (strings.HasPrefix(e.Name(), "tmp_shardctl-test-") || strings.HasPrefix(e.Name(), "tmp_Test")) {
				cands = append(cands, filepath.Join(sb, e.Name()))
			}
		}
	}
	var removed []string
	for _, d := range cands {
		fi, err := os.Lstat(d)
		if err != nil || !fi.IsDir() || now.Sub(fi.ModTime()) < staleAfter || serving(d) {
			continue
		}
		if os.RemoveAll(d) == nil {
			removed = append(removed, d)
		}
	}
	return removed
}

// serving reports whether a pid file in dir or one level down (a server's
// home) names a live process.
func serving(dir string) bool {
	for _, pat := range []string{"*.pid", "*/*.pid"} {
		m, _ := filepath.Glob(filepath.Join(dir, pat))
		for _, f := range m {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err == nil && pid > 0 && syscall.Kill(pid, 0) == nil {
				return true
			}
		}
	}
	return false
}

// sweepSBs are where the chroot'ed sandboxes' server homes live.
func sweepSBs() []string {
	var out []string
	for _, k := range []Kind{{Flavor: sandbox.FlavorMySQL}, MariaDB118} {
		if r, ok := sandbox.RootFor(k.Flavor, k.Version); ok {
			out = append(out, filepath.Join(r.Dir, "sb"))
		}
	}
	return out
}
