package checks

import (
	"strings"
	"testing"

	"github.com/shardctl/shardctl/internal/mapfixture"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/pipeline/checks/checktest"
	"github.com/shardctl/shardctl/shardmap"
)

// The target schema must be free: a live shard's location is refused, so
// is a schema that holds tables for a move (which drops it on abort); a
// new schema is accepted.
func TestCheckTargetIsFree(t *testing.T) {
	_, c := checkEnv(t, "move", "chk_tgt", "CREATE TABLE t (id INT PRIMARY KEY)")
	dst, p := c.Dst, c.Plan
	p.Target.Schema = "chk_tgt_new"
	testenv.DropAtEnd(t, dst, p.Target.Schema)
	p.Target.ShardID = 0 // a move's target has no shard id of its own
	p.DropTargetSchema = true
	c.Map = &shardmap.Map{}
	if err := runCheck(t, "target is free", c); err != nil {
		t.Fatalf("a new schema: %v", err)
	}
	testenv.Schema(t, dst, "chk_tgt_new", "CREATE TABLE old (id INT PRIMARY KEY)")
	checktest.WantRefused(t, runCheck(t, "target is free", c), "exists with 1 tables")
	// A shard that lives there: never to be dropped, whatever the schema holds.
	c.Map = mapfixture.TwoRanges()
	c.Map.Locations[1] = shardmap.Location{ShardID: 2, Host: p.Target.Host, Port: p.Target.Port, Schema: p.Target.Schema}
	checktest.WantRefused(t, runCheck(t, "target is free", c), "shard 2 lives at the target")
	// Another fleet's sharding database (issue 53): named as one, never offered for dropping.
	c.Map = &shardmap.Map{}
	p.Target.Schema = "chk_tgt_othermap"
	testenv.Schema(t, dst, p.Target.Schema, "CREATE TABLE version (v INT PRIMARY KEY)", "CREATE TABLE locations (id INT PRIMARY KEY)",
		"CREATE TABLE partition_functions (id INT PRIMARY KEY)", "CREATE TABLE list_points (id INT PRIMARY KEY)")
	err := runCheck(t, "target is free", c)
	checktest.WantRefused(t, err, "is a sharding database (it holds a shard map's tables: list_points, locations, partition_functions, version)")
	if strings.Contains(err.Error(), "drop") {
		t.Fatalf("a sharding database offered for dropping: %v", err)
	}
}
