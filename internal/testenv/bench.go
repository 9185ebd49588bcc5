package testenv

// Benchmark helpers: on a shared machine CPU seconds compare better than
// wall time, and a round must not be billed for the one before it.

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// EnvInt is the positive integer in the environment variable name, or def.
func EnvInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// ServerCPU is the CPU seconds server i has used.
func (e *Env) ServerCPU(t testing.TB, i int) float64 {
	t.Helper()
	pid := "mariadbd.pid"
	if MySQL() {
		pid = "mysqld.pid"
	}
	b, err := os.ReadFile(filepath.Join(e.Config.Dir, fmt.Sprintf("s%d", i), pid))
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.ReadFile("/proc/" + strings.TrimSpace(string(b)) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(st)[strings.LastIndexByte(string(st), ')')+2:])
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / 100 // clock ticks; USER_HZ is 100 on Linux
}

// SelfCPU is the CPU seconds this process has used.
func SelfCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// Flush waits until the server has written its dirty pages, so the work of
// one round (or the loading of a table) is not billed to the next.
func Flush(t testing.TB, db *sql.DB) {
	t.Helper()
	var pct, lwm string
	if err := db.QueryRow("SELECT @@innodb_max_dirty_pages_pct, @@innodb_max_dirty_pages_pct_lwm").Scan(&pct, &lwm); err != nil {
		t.Fatal(err)
	}
	Exec(t, db, "SET GLOBAL innodb_max_dirty_pages_pct_lwm = 0.001, innodb_max_dirty_pages_pct = 0.001")
	defer Exec(t, db, "SET GLOBAL innodb_max_dirty_pages_pct = "+pct+", innodb_max_dirty_pages_pct_lwm = "+lwm)
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var name string
		var dirty int
		if err := db.QueryRow("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'").Scan(&name, &dirty); err != nil {
			t.Fatal(err)
		}
		if dirty < 100 {
			return
		}
	}
	t.Log("dirty pages still being flushed after 60 s")
}
