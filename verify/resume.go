package verify

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/shardctl/shardctl/plans"
)

// Checkpoint is how far a verification got, saved as chunks finish so a
// long one interrupted (Ctrl-C, a crash, a lost connection) continues with
// --resume instead of starting over. Key names what was compared; a
// checkpoint of another comparison is never continued.
type Checkpoint struct {
	Key     string   `json:"key"`
	Done    []string `json:"done,omitempty"`   // tables finished
	Table   string   `json:"table,omitempty"`  // the table under way
	After   []string `json:"after,omitempty"`  // the upper key of its last chunk compared
	Partial Result   `json:"partial,omitzero"` // what the table under way found so far
	Result  Result   `json:"result"`           // what the finished tables found
}

// LoadCheckpoint reads the checkpoint at path for the comparison key; ok is
// false when there is none (or it belongs to another comparison).
func LoadCheckpoint(path, key string) (cp *Checkpoint, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read the verify checkpoint %s: %w", path, err)
	}
	cp = &Checkpoint{}
	if err := json.Unmarshal(b, cp); err != nil {
		return nil, false, fmt.Errorf("verify checkpoint %s is damaged (%v): delete it to start over", path, err)
	}
	if cp.Key != key {
		return nil, false, nil
	}
	return cp, true, nil
}

// SaveCheckpoint writes cp to path atomically.
func SaveCheckpoint(path string, cp Checkpoint) error {
	b, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	return plans.WriteAtomic(path, b)
}
