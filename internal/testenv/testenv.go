// Package testenv gives integration tests real MariaDB (or, with
// SHARDCTL_TEST_FLAVOR=mysql, Oracle MySQL) servers: one sandbox
// per test binary, on free loopback ports, torn down when the binary exits.
// When CI is set, a missing server is a failure, never a skip; under
// go test -short (scripts/test.sh --unit) every server test skips, saying so.
package testenv

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/sandbox"
)

// Env is a running sandbox.
type Env struct {
	Config  sandbox.Config
	Servers []sandbox.Server
}

var (
	once    sync.Once
	env     *Env
	envErr  error
	servers = 3
)

// Main wraps testing.M: it runs the tests and then stops the sandbox if one
// was started. When tests failed, the data directories are kept and the error
// log of any server that died is printed, so CI shows why.
func Main(m *testing.M) {
	flag.Parse() // testing.Short needs the flags; m.Run parses them only later
	if !testing.Short() {
		for _, d := range sweepStale(os.TempDir(), sweepSBs(), time.Now()) {
			fmt.Fprintf(os.Stderr, "testenv: removed %s, a sandbox an earlier test binary left (no server runs in it)\n", d)
		}
	}
	code := m.Run()
	stopOthers(code != 0 || os.Getenv("SHARDCTL_TEST_KEEP") != "")
	if env != nil {
		if code != 0 {
			reportCrashes(env.Config)
		}
		if shared() {
			os.Exit(code) // the next binary uses it; scripts/test.sh stops it
		}
		keep := code != 0 || os.Getenv("SHARDCTL_TEST_KEEP") != ""
		_ = sandbox.Down(context.Background(), env.Config, !keep)
		if keep {
			fmt.Fprintf(os.Stderr, "testenv: sandbox data kept in %s\n", env.Config.Dir)
		}
	}
	os.Exit(code)
}

// logTail is the end of server i's error log.
func logTail(c sandbox.Config, i int) string {
	b, _ := os.ReadFile(filepath.Join(c.Dir, fmt.Sprintf("s%d", i), "error.log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}

// reportCrashes prints the end of the error log of every server that is not running.
func reportCrashes(c sandbox.Config) {
	st, err := sandbox.Status(context.Background(), c)
	if err != nil {
		return
	}
	for _, s := range st {
		if s.Running {
			continue
		}
		fmt.Fprintf(os.Stderr, "testenv: server %d (port %d) died; the end of its error log:\n%s\n", s.Index, s.Port, logTail(c, s.Index))
	}
}

// Get returns the package's sandbox, starting it on first use.
func Get(t testing.TB) *Env {
	t.Helper()
	if testing.Short() {
		t.Skip("needs real servers: skipped under -short (scripts/test.sh --fast or the full suite runs it)")
	}
	once.Do(func() {
		if envErr = serversAvailable(); envErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if d := os.Getenv(SharedEnv); d != "" {
			cfg, srv, err := upShared(ctx, d, servers)
			if err != nil {
				envErr = fmt.Errorf("the shared sandbox in %s: %w", d, err)
				return
			}
			env = &Env{Config: cfg, Servers: srv}
			return
		}
		dir, err := os.MkdirTemp("", "shardctl-test-")
		if err != nil {
			envErr = err
			return
		}
		// Ports found free can be taken by another test binary's servers
		// before ours bind them (the two flavors' passes start many at once):
		// such a start is tried again on other ports.
		cfg, srv, err := UpOnFreePorts(ctx, servers, func(port int) sandbox.Config {
			return sandbox.Config{Dir: dir, Servers: servers, BasePort: port, Flavor: Flavor(), Version: Version(), DieWithParent: true, Lean: true}
		})
		if err != nil {
			// The data directories go with the failed start: their logs are
			// printed first, so CI shows why a server did not come up.
			for i := 1; i <= servers; i++ {
				fmt.Fprintf(os.Stderr, "testenv: the sandbox did not start; the end of server %d's error log:\n%s\n", i, logTail(cfg, i))
			}
			_ = sandbox.Down(context.Background(), cfg, true)
			envErr = err
			return
		}
		env = &Env{Config: cfg, Servers: srv}
	})
	if envErr == nil && env != nil {
		// A server that died (a crash in an earlier test) comes back, so one
		// crash fails one test rather than every test after it.
		if st, err := sandbox.Status(context.Background(), env.Config); err == nil {
			for _, s := range st {
				if !s.Answers {
					reportCrashes(env.Config)
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					if srv, err := sandbox.Up(ctx, env.Config); err == nil {
						env.Servers = srv
					}
					cancel()
					break
				}
			}
		}
	}
	skipUnavailable(t, envErr)
	return env
}

// Subtests is a test whose subtests use the sandbox. Without servers
// (none installed, or -short) the parent skips with the reason before
// any subtest runs, rather than pass with every subtest skipped; and when
// CI is set, a parent whose subtests all skipped, whatever the reason,
// fails: a run that tested nothing must not read as a pass.
type Subtests struct {
	t            *testing.T
	mu           sync.Mutex
	ran, skipped int
}

// NewSubtests starts the sandbox for t's subtests (or skips t, see Get).
func NewSubtests(t *testing.T) *Subtests {
	t.Helper()
	Get(t)
	return subtests(t)
}

// subtests is NewSubtests without the sandbox.
func subtests(t *testing.T) *Subtests {
	s := &Subtests{t: t}
	// A parent's cleanup runs after all its subtests, parallel ones included.
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.ran > 0 && s.skipped == s.ran && os.Getenv("CI") != "" {
			t.Errorf("all %d subtests skipped (CI is set, so this is a failure): nothing was tested", s.ran)
		}
	})
	return s
}

// Run runs subtest f as t.Run does and counts whether it skipped.
func (s *Subtests) Run(name string, f func(t *testing.T)) bool {
	s.t.Helper()
	return s.t.Run(name, s.counted(f))
}

// RunParallel runs subtest f in parallel with the parent's other parallel
// subtests (t.Parallel): for subtests that share nothing but the servers
// (their own schemas, shard map and plan directory), so the waits of one
// (route grace, a killed process's resume, the load's phases) overlap
// another's work. The count is taken when f ends, not when RunParallel
// returns.
func (s *Subtests) RunParallel(name string, f func(t *testing.T)) {
	s.t.Helper()
	counted := s.counted(f)
	s.t.Run(name, func(t *testing.T) {
		t.Parallel()
		counted(t)
	})
}

// counted wraps f so that its run, and whether it skipped, are counted.
func (s *Subtests) counted(f func(t *testing.T)) func(t *testing.T) {
	return func(t *testing.T) {
		defer func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.ran++
			if t.Skipped() {
				s.skipped++
			}
		}()
		f(t)
	}
}

// serversAvailable checks that servers of the flavor under test can start.
func serversAvailable() error {
	if _, ok := sandbox.RootFor(Flavor(), Version()); ok {
		ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
		defer cancel()
		return sandbox.EnsureRoot(ctx, Flavor(), Version())
	}
	_, err := sandbox.Binary("mariadbd")
	return err
}

// skipUnavailable skips the test (fails it under CI) when err says the servers cannot start.
func skipUnavailable(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s sandbox unavailable (CI is set, so this is a failure): %v", Flavor(), err)
	}
	t.Skipf("%s sandbox unavailable: %v", Flavor(), err)
}

// Flavor is the server flavor the tests run on: SHARDCTL_TEST_FLAVOR
// ("mysql" or "mariadb", the default).
func Flavor() string {
	if os.Getenv("SHARDCTL_TEST_FLAVOR") == sandbox.FlavorMySQL {
		return sandbox.FlavorMySQL
	}
	return sandbox.FlavorMariaDB
}

// Version is the server version the tests run on: SHARDCTL_TEST_VERSION
// (11.8: MariaDB 11.8 from its own root; by default the system's MariaDB,
// or MySQL's root).
func Version() string {
	if os.Getenv("SHARDCTL_TEST_VERSION") == sandbox.Version118 && !MySQL() {
		return sandbox.Version118
	}
	return sandbox.VersionSystem
}

// MySQL reports whether the tests run on Oracle MySQL.
func MySQL() bool { return Flavor() == sandbox.FlavorMySQL }

// Addr returns server i's address (1-based).
func (e *Env) Addr(i int) dbutil.Addr { return e.Servers[i-1].Addr() }

// DB opens a pool on server i as the tool account, closed at test end.
func (e *Env) DB(t testing.TB, i int, schema string) *sql.DB {
	t.Helper()
	db, err := dbutil.Open(context.Background(), e.Addr(i), sandbox.Creds(), schema)
	if err != nil {
		t.Fatalf("open server %d: %v", i, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Dump runs query and renders each row as its quoted column values joined by
// " | " (NULL as NULL), so tests compare tables exactly.
func Dump(t testing.TB, db *sql.DB, query string, args ...any) []string {
	t.Helper()
	rows, err := db.Query(query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out []string
	for rows.Next() {
		vals, ptrs := dbutil.Dest[sql.RawBytes](len(cols))
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		parts := make([]string, len(vals))
		for i, v := range vals {
			if v == nil {
				parts[i] = "NULL"
			} else {
				parts[i] = fmt.Sprintf("%q", v)
			}
		}
		out = append(out, strings.Join(parts, " | "))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

var seqTable = regexp.MustCompile("(`?[A-Za-z0-9_]+`?\\.)?`?seq_([0-9]+)_to_([0-9]+)`?")

// SQL adapts a test statement to the flavor under test: on MySQL, MariaDB's
// sequence tables (seq_1_to_N) become a recursive CTE of the same name.
func SQL(q string) string {
	if !MySQL() {
		return q
	}
	return seqTable.ReplaceAllStringFunc(q, func(m string) string {
		g := seqTable.FindStringSubmatch(m)
		return fmt.Sprintf("(WITH RECURSIVE seq_cte(seq) AS (SELECT CAST(%s AS UNSIGNED) UNION ALL SELECT seq + 1 FROM seq_cte WHERE seq < %s) SELECT seq FROM seq_cte) AS seq_%s_to_%s",
			g[2], g[3], g[2], g[3])
	})
}

var (
	md5Mu    sync.Mutex
	md5Users int
)

// NeedMD5 gives a test MD5() in SQL on every server for its duration. A
// stock MySQL 9.6+ has none (it lives in component_classic_hashing), and the
// sandbox runs servers as installed; only the tests of HASH maps, whose fence
// triggers hash inside the server, install it. MariaDB always has MD5().
func (e *Env) NeedMD5(t testing.TB) {
	t.Helper()
	if !MySQL() {
		return
	}
	md5Mu.Lock()
	defer md5Mu.Unlock()
	if md5Users == 0 {
		e.classicHashing(t, "INSTALL COMPONENT 'file://component_classic_hashing'", 3529) // already installed
	}
	md5Users++
	t.Cleanup(func() {
		md5Mu.Lock()
		defer md5Mu.Unlock()
		if md5Users--; md5Users == 0 {
			e.classicHashing(t, "UNINSTALL COMPONENT 'file://component_classic_hashing'", 3537) // not installed
		}
	})
}

func (e *Env) classicHashing(t testing.TB, stmt string, harmless uint16) {
	for i := range e.Servers {
		db, err := dbutil.Open(context.Background(), e.Addr(i+1), sandbox.Creds(), "")
		if err == nil {
			if _, err = db.Exec(stmt); dbutil.ErrNumber(err) == harmless {
				err = nil
			}
			db.Close()
		}
		if err != nil {
			t.Errorf("server %d: %s: %v", i+1, stmt, err)
		}
	}
}

// Exec runs a test's statement (adapted to the flavor by SQL) and fails the
// test if the server refuses it.
func Exec(t testing.TB, q dbutil.Querier, stmt string, args ...any) {
	t.Helper()
	stmt = SQL(stmt)
	if _, err := q.ExecContext(context.Background(), stmt, args...); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}
