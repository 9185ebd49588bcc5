package plans

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/shardctl/shardctl/watermark"
)

// Plan files written before copy and prune shared one mark type carry
// "rows" in copy marks and "deleted" in prune marks: they still load, and
// the JSON written now is the same.
func TestMarksJSONUnchanged(t *testing.T) {
	old := `{"copy":{"employees":{"after":["150"],"done":false,"rows":50}},` +
		`"prune":{"salaries":{"after":["7","2001-01-01"],"done":false,"deleted":300},"titles":{"done":true,"deleted":0}}}`
	var c Checkpoints
	if err := json.Unmarshal([]byte(old), &c); err != nil {
		t.Fatal(err)
	}
	want := Checkpoints{
		Copy: map[string]watermark.Mark{"employees": {After: []string{"150"}, Rows: 50}},
		Prune: PruneMarks{
			"salaries": {After: []string{"7", "2001-01-01"}, Rows: 300},
			"titles":   {Done: true},
		},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("loaded %+v, want %+v", c, want)
	}
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var got, exp map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(old), &exp); err != nil {
		t.Fatal(err)
	}
	// Positions are objects with omitempty on a struct: they are always written.
	for _, k := range []string{"start", "applied", "final"} {
		delete(got, k)
	}
	if !reflect.DeepEqual(got, exp) {
		t.Fatalf("wrote %s, want the old form %s", b, old)
	}
	var empty Checkpoints
	if b, err := json.Marshal(empty); err != nil || string(b) != `{"start":{"file":"","pos":0},"applied":{"file":"","pos":0},"final":{"file":"","pos":0}}` {
		t.Fatalf("empty checkpoints: %s %v", b, err)
	}
}
