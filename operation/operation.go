// Package operation is the one list of shardctl's operations and what the
// shared pipeline needs to know of each. An operation's rows (its copy and
// fence filters), its shard-map changes (prepare, offline, cutover, after
// cleanup), its cleanup and its undo (abort) are data of the plan its own
// package builds (move.Plan, split.Plan, merge.Plan), so the pipeline runs
// every operation the same way; what the data cannot say is declared here,
// once. A new operation is its planning package and one entry in registry;
// no other code names it (internal/layout checks that no string literal
// does).
package operation

// The operations' names, as plans store them ("operation" in a plan file).
const (
	Move  = "move"
	Split = "split"
	Merge = "merge"
	// MoveKeys moves some keys of a shard (LIST points, a RANGE sub-range)
	// into another existing shard (move --keys|--range --into). Keys moved
	// to a new shard of their own are a Split.
	MoveKeys = "move-keys"
)

// Op is what the pipeline asks of an operation.
type Op struct {
	Name string
	// WholeSchema: every table of the shard's schema goes, unfiltered, to
	// another server (a move). The reverse window tails the whole schema,
	// and no foreign key can end with a child and its parent on two shards.
	WholeSchema bool
	// IntoExisting: the target is an existing shard that keeps serving its
	// own keys (a merge). The plan is about both shards (both are locked and
	// checked against the shard map), the target's fence covers only the
	// rows moved in, and rows the two may both hold are checked (key
	// collisions, AUTO_INCREMENT counters).
	IntoExisting bool
	// DividesKeys: a shard's keys are divided between two shards (a split).
	// A foreign key between sharded tables that does not carry the shard key
	// may then leave a child and its parent apart, which only the rows tell.
	DividesKeys bool
	// ReverseWindow: --reverse-window is supported (reverse replication
	// after cutover, docs/rollback.md).
	ReverseWindow bool
}

// registry is every operation.
var registry = []Op{
	{Name: Move, WholeSchema: true, ReverseWindow: true},
	{Name: Split, DividesKeys: true, ReverseWindow: true},
	{Name: Merge, IntoExisting: true, ReverseWindow: true},
	{Name: MoveKeys, IntoExisting: true, DividesKeys: true, ReverseWindow: true},
}

// Of is the operation named name; an unknown name (a damaged or newer plan)
// gives an Op with only its name, which has none of the properties.
func Of(name string) Op {
	for _, o := range registry {
		if o.Name == name {
			return o
		}
	}
	return Op{Name: name}
}

// Known reports whether name is a registered operation.
func Known(name string) bool {
	for _, o := range registry {
		if o.Name == name {
			return true
		}
	}
	return false
}

// All is every registered operation, in registry order.
func All() []Op { return append([]Op(nil), registry...) }
