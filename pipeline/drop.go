package pipeline

import (
	"slices"

	"github.com/shardctl/shardctl/plans"
)

// schemaTables lists, by name, the tables of a plan's schemas whose trigger
// backups a failed DROP DATABASE may leave (dbutil.DropSchema): those it
// copies and those it fences (a merge fences the global tables it does not
// copy).
func schemaTables(p *plans.Plan) []string {
	var out []string
	for _, t := range p.Copy {
		out = append(out, t.Name)
	}
	for _, f := range p.Fence {
		if !slices.Contains(out, f.Name) {
			out = append(out, f.Name)
		}
	}
	return out
}
