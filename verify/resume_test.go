package verify

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/plans"
)

// A checkpoint is taken at its word (its done tables are not compared
// again), so one edited, damaged or edited and signed again is refused with
// what to do; one of another comparison is ignored.
func TestCheckpointRefusedWhenEdited(t *testing.T) {
	path := filepath.Join(t.TempDir(), "verify.checkpoint")
	cp := Checkpoint{Key: "k", Done: []string{"a"}, Table: "b", After: []string{"7"}, Result: Result{Tables: 1, Chunks: 2, Rows: 9}}
	if err := SaveCheckpoint(path, cp); err != nil {
		t.Fatal(err)
	}
	got, ok, err := LoadCheckpoint(path, "k")
	if err != nil || !ok || got.Table != "b" || got.Result.Rows != 9 {
		t.Fatalf("a saved checkpoint: %+v %v %v", got, ok, err)
	}
	if _, ok, err := LoadCheckpoint(path, "other"); ok || err != nil {
		t.Fatalf("another comparison's checkpoint: %v %v", ok, err)
	}
	good, _ := os.ReadFile(path)
	resigned := cp
	resigned.Done = []string{"a", "b", "c"} // every table done, its result not
	signed, err := plans.Seal(checkpointFormat, "checkpoint", resigned)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"edited":          bytes.Replace(good, []byte(`"done": [`), []byte(`"done": ["b", "c", `), 1),
		"cut off":         good[:len(good)/2],
		"unsealed":        []byte(`{"key":"k","done":["a","b","c"],"result":{"tables":3}}`),
		"signed again":    signed,
		"done twice":      mustSeal(t, Checkpoint{Key: "k", Done: []string{"a", "a"}, Result: Result{Tables: 2}}),
		"unknown field":   mustSeal(t, map[string]any{"key": "k", "skip": true, "result": map[string]any{}}),
		"under way, done": mustSeal(t, Checkpoint{Key: "k", Done: []string{"b"}, Table: "b", Result: Result{Tables: 1}}),
	} {
		if bytes.Equal(b, good) {
			t.Fatalf("%s: the edit changed nothing", name)
		}
		os.WriteFile(path, b, 0o600)
		_, ok, err := LoadCheckpoint(path, "k")
		if ok || err == nil || !strings.Contains(err.Error(), "delete it, or run verify without --resume") {
			t.Errorf("%s checkpoint: ok %v, err %v", name, ok, err)
		}
	}
}

func mustSeal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := plans.Seal(checkpointFormat, "checkpoint", v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
