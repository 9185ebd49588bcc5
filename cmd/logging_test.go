package cmd

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/viper"
)

// While the view is on screen, info lines go to --log-file only, warnings
// print above the view, and debug level prints everything above it.
func TestLogLinesAndTheView(t *testing.T) {
	dir := t.TempDir()
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var errOut bytes.Buffer
		a := &app{v: viper.New(), errOut: &errOut}
		logFile := filepath.Join(dir, level.String()+".log")
		a.v.Set("log-file", logFile)
		log, err := a.newLogger(level)
		if err != nil {
			t.Fatal(err)
		}
		screen, err := os.Create(filepath.Join(dir, level.String()+".screen"))
		if err != nil {
			t.Fatal(err)
		}
		v := newLiveView(screen, newViewModel("move shard 1"))
		a.view.Store(v)
		log.Info("step started", "step", "copy")
		log.Warn("replica lag high")
		a.view.Store(nil)
		log.Info("after the view")
		screen.Close()
		shown, _ := os.ReadFile(screen.Name())
		kept, _ := os.ReadFile(logFile)
		if got := string(shown); strings.Contains(got, "step started") != (level == slog.LevelDebug) || !strings.Contains(got, "replica lag high") || !strings.Contains(got, "move shard 1") {
			t.Errorf("level %s: screen %q", level, got)
		}
		if !strings.Contains(string(kept), "step started") || !strings.Contains(string(kept), "replica lag high") {
			t.Errorf("level %s: log file %q", level, kept)
		}
		if !strings.Contains(errOut.String(), "after the view") {
			t.Errorf("level %s: without the view lines go to stderr: %q", level, errOut.String())
		}
	}
}
