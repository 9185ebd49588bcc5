package verify

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

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

// checkpointFormat marks a sealed verify checkpoint (plans.Seal): a
// checkpoint is taken at its word (tables marked done are not compared
// again), so one edited or damaged is refused like a plan file.
const checkpointFormat = "shardctl-verify-checkpoint"

// LoadCheckpoint reads the checkpoint at path for the comparison key; ok is
// false when there is none (or it belongs to another comparison). A
// checkpoint that fails its checksum or does not add up is an error.
func LoadCheckpoint(path, key string) (cp *Checkpoint, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read the verify checkpoint %s: %w", path, err)
	}
	refuse := func(why any) error {
		return fmt.Errorf("verify checkpoint %s is refused: %v; delete it, or run verify without --resume, to compare from the start", path, why)
	}
	body, err := plans.Unseal(b, checkpointFormat, "checkpoint")
	if err != nil {
		return nil, false, refuse(err)
	}
	cp = &Checkpoint{}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(cp); err != nil {
		return nil, false, refuse(err)
	}
	if cp.Key != key {
		return nil, false, nil
	}
	// What every save keeps true, so a checkpoint edited and signed again
	// is not taken at its word either.
	if len(cp.Done) != cp.Result.Tables || len(slices.Compact(slices.Sorted(slices.Values(cp.Done)))) != len(cp.Done) || slices.Contains(cp.Done, cp.Table) {
		return nil, false, refuse(fmt.Sprintf("%d tables marked done (%s) but %d found so far (the file was edited or damaged)", len(cp.Done), strings.Join(cp.Done, ", "), cp.Result.Tables))
	}
	return cp, true, nil
}

// SaveCheckpoint writes cp to path atomically, sealed.
func SaveCheckpoint(path string, cp Checkpoint) error {
	b, err := plans.Seal(checkpointFormat, "checkpoint", cp)
	if err != nil {
		return err
	}
	return plans.WriteAtomic(path, b)
}
