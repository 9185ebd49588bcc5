package plans

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/shardctl/shardctl/watermark"
)

// Deferred verify chunks were a plans-only type before verify and the plan
// shared watermark.Range: an old document still loads and is written back
// the same.
func TestDeferredJSONUnchanged(t *testing.T) {
	old := `{"deferred_verify":[{"table":"employees","lo":["10"],"hi":["20"]},{"table":"titles","hi":["7","x"]},{"table":"salaries"}]}`
	var c Checkpoints
	if err := json.Unmarshal([]byte(old), &c); err != nil {
		t.Fatal(err)
	}
	want := []watermark.Range{
		{Table: "employees", Lo: []string{"10"}, Hi: []string{"20"}},
		{Table: "titles", Hi: []string{"7", "x"}},
		{Table: "salaries"},
	}
	if !reflect.DeepEqual(c.Deferred, want) {
		t.Fatalf("loaded %+v, want %+v", c.Deferred, want)
	}
	b, err := json.Marshal(c)
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
	if !reflect.DeepEqual(got["deferred_verify"], exp["deferred_verify"]) {
		t.Fatalf("wrote %s, want the old form %s", b, old)
	}
}
