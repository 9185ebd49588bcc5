package testenv

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// A leftover sandbox goes once it is old and no server runs in it; a fresh
// one, one with a live server, the MySQL template and other files stay.
func TestSweepStaleRemovesOnlyDeadOldSandboxes(t *testing.T) {
	tmp, sb := t.TempDir(), t.TempDir()
	now := time.Now()
	old := now.Add(-3 * time.Hour)
	mk := func(dir string, age time.Time, pid int) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, "s1"), 0o755); err != nil {
			t.Fatal(err)
		}
		if pid != 0 {
			if err := os.WriteFile(filepath.Join(dir, "s1", "mysqld.pid"), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chtimes(dir, age, age); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	dead := mk(filepath.Join(tmp, "shardctl-test-1"), old, 0)
	deadPid := mk(filepath.Join(tmp, "shardctl-test-other-2"), old, 999999999)
	fresh := mk(filepath.Join(tmp, "shardctl-test-3"), now, 0)
	live := mk(filepath.Join(tmp, "shardctl-test-4"), old, os.Getpid())
	other := mk(filepath.Join(tmp, "someone-else"), old, 0)
	sbDead := mk(filepath.Join(sb, "tmp_shardctl-test-1"), old, 0)
	sbLive := mk(filepath.Join(sb, "tmp_TestX_001"), old, os.Getpid())
	tmpl := mk(filepath.Join(sb, "template"), old, 0)
	operator := mk(filepath.Join(sb, "tmp_shardctl-sandbox"), old, 0)

	got := sweepStale(tmp, []string{sb}, now)
	slices.Sort(got)
	want := []string{dead, deadPid, sbDead}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("removed %v, want %v", got, want)
	}
	for _, d := range want {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s still there", d)
		}
	}
	for _, d := range []string{fresh, live, other, sbLive, tmpl, operator} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
}
