package plans

import (
	"strings"
	"testing"

	"github.com/shardctl/shardctl/tables/tabledef"
)

// Dry runs and 'plan show' mark row and size estimates as estimates.
func TestPrintLabelsEstimates(t *testing.T) {
	p := New("move", "move shard 1")
	p.Copy = []tabledef.Table{{Name: "employees", PK: []string{"emp_no"}, EstRows: 269175, EstBytes: 1 << 20}}
	var b strings.Builder
	Print(&b, p)
	for _, s := range []string{"~269175", "~1.0 MiB", "~ estimate from table statistics"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("missing %q in\n%s", s, b.String())
		}
	}
}
