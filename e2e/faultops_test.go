package e2e

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// faultOp is one operation of the fault matrix: the fleet its cells start
// from, its command, and the load's keys it moves and keeps.
type faultOp struct {
	// name is the cells' first element: OP/STEP/FAULT; a move's cells are
	// STEP/FAULT (name ""), as they were before the other operations joined.
	name string
	// servers and sizes lay the fleet out: shard k on servers[k-1] with
	// sizes[k-1] employees (LIST tenants when list). A move's fleet is
	// kept from cell to cell, the shard moved back and forth between servers
	// 2 and 3; every other operation's cell seeds it afresh, its source on
	// server 2 and its target on server 3.
	servers, sizes []int
	list           bool
	args           func(f *faultFleet, to int) []string
	// groups is the load's keys (NAME=LO-HI): the ones the operation
	// moves, and (but for a move) some a shard keeps serving, which stay on
	// server stayAt.
	groups func(c *cluster) (moving, staying string)
	stayAt int
}

// kept is whether the op's fleet is kept from one cell to the next.
func (op faultOp) kept() bool { return op.name == "" }

// cell is the name of op's cell at step with fault k.
func (op faultOp) cell(step, k string) string {
	if op.name == "" {
		return step + "/" + k
	}
	return op.name + "/" + step + "/" + k
}

// faultKeys is the key moves' tenants: 60 of shard 1's, each with rows
// (about 540 over the five tables: the copy and the cleanup pass their
// third checkpoint at --chunk-rows 50).
const faultKeysLo, faultKeysHi = 201, 261

var faultOps = []faultOp{
	{name: "", servers: []int{2}, sizes: []int{300},
		args: func(f *faultFleet, to int) []string {
			return []string{"move", "--shard", "1", "--to", f.addr(to).String()}
		},
		groups: func(c *cluster) (string, string) { return c.keys("moving", 1, 300), "" }},
	// The upper third of shard 1 (some 900 rows) goes to a new shard.
	{name: "split", servers: []int{2}, sizes: []int{300}, stayAt: 2,
		args: func(f *faultFleet, to int) []string {
			return []string{"split", "--shard", "1", "--at", fmt.Sprint(f.c.shards[0].Lower + 200), "--to", f.addr(to).String()}
		},
		groups: func(c *cluster) (string, string) {
			lo := c.shards[0].Lower
			return fmt.Sprintf("moving=%d-%d", lo+200, lo+400), fmt.Sprintf("staying=%d-%d", lo+100, lo+200)
		}},
	// Shard 2 merges into shard 1, a live schema the load writes too.
	{name: "merge", servers: []int{3, 2}, sizes: []int{300, 300}, stayAt: 3,
		args: func(f *faultFleet, to int) []string {
			return []string{"merge", "--shard", "2", "--into", "1"}
		},
		groups: func(c *cluster) (string, string) { return c.keys("moving", 2, 300), c.keys("staying", 1, 300) }},
	// 60 tenants of shard 1 go into shard 2 (LIST points).
	{name: "keys", servers: []int{2, 3}, sizes: []int{300, 300}, list: true, stayAt: 2,
		args: func(f *faultFleet, to int) []string {
			var ks []string
			for k := int64(faultKeysLo); k < faultKeysHi; k++ {
				ks = append(ks, fmt.Sprint(f.c.shards[0].Lower+k))
			}
			return []string{"move", "--shard", "1", "--keys", strings.Join(ks, ","), "--into", "2"}
		},
		groups: func(c *cluster) (string, string) {
			lo := c.shards[0].Lower
			return fmt.Sprintf("moving=%d-%d", lo+faultKeysLo, lo+faultKeysHi), fmt.Sprintf("staying=%d-%d", lo+100, lo+faultKeysLo)
		}},
}

// faultSubset is the cells CI runs, fixed. The move's: each of the 13 faults
// once, each of the 7 steps at least once. The other operations' (at most 4,
// for the suite's time): what the move's cells leave out: a merge into a
// live schema with its target crashing at the catch-up, a split with the
// sharding database down at the switch (a new shard registered, the source
// keeping its other keys), a key move (LIST points changing shard) with its
// source's connections reset during the copy, and a split's reverse tail,
// filtered to the moved keys, into a source that keeps serving the others,
// its connections reset.
var faultSubset = []string{
	"copy/source-crash", "catchup/target-crash", "verify/shardmap-crash",
	"fence/source-stall", "cutover/target-stall", "cleanup/shardmap-stall",
	"window/source-reset", "copy/target-reset", "fence/shardmap-reset",
	"catchup/source-blackhole", "cutover/target-blackhole", "verify/shardmap-blackhole",
	"cleanup/latency",
	"merge/catchup/target-crash", "split/cutover/shardmap-crash",
	"keys/copy/source-reset", "split/window/source-reset",
}

// TestFaultSubsetCovers: the subset CI runs names only cells of the matrix,
// covers each fault and each step of the move at least once, and adds at
// most 4 cells of the other operations, each operation at least once.
func TestFaultSubsetCovers(t *testing.T) {
	all := map[string]faultOp{}
	for _, op := range faultOps {
		for _, step := range faultSteps {
			for _, k := range faultKinds {
				all[op.cell(step.name, k.name)] = op
			}
		}
	}
	if n := len(faultOps) * len(faultSteps) * len(faultKinds); len(all) != n {
		t.Fatalf("the matrix names %d distinct cells, want %d (a name is shared)", len(all), n)
	}
	steps, faults, others := map[string]bool{}, map[string]bool{}, map[string]int{}
	for _, cell := range faultSubset {
		op, ok := all[cell]
		if !ok {
			t.Errorf("the subset names %q, no cell of the matrix", cell)
			continue
		}
		if !op.kept() {
			others[op.name]++
			continue
		}
		step, fault, _ := strings.Cut(cell, "/")
		steps[step], faults[fault] = true, true
	}
	for _, s := range faultSteps {
		if !steps[s.name] {
			t.Errorf("the subset holds no move cell at step %s", s.name)
		}
	}
	for _, k := range faultKinds {
		if !faults[k.name] {
			t.Errorf("the subset holds no move cell with fault %s", k.name)
		}
	}
	n := 0
	for _, op := range faultOps {
		if !op.kept() && others[op.name] == 0 {
			t.Errorf("the subset holds no cell of %s", op.name)
		}
		n += others[op.name]
	}
	if n > 4 {
		t.Errorf("the subset holds %d cells of operations other than the move, over 4 (the suite's time)", n)
	}
	if c := slices.Compact(slices.Sorted(slices.Values(faultSubset))); len(c) != len(faultSubset) {
		t.Errorf("the subset names a cell twice")
	}
}

// groupLo is the first key of a load group NAME=LO-HI.
func groupLo(t *testing.T, g string) int64 {
	t.Helper()
	lo, _, _ := strings.Cut(g[strings.IndexByte(g, '=')+1:], "-")
	n, err := strconv.ParseInt(lo, 10, 64)
	if err != nil {
		t.Fatalf("group %q: %v", g, err)
	}
	return n
}
