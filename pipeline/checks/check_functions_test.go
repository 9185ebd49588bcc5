package checks

import (
	"context"
	"testing"

	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/pipeline/checks/checktest"
)

// Servers of one family that have the checksums' functions are accepted;
// a HASH split needs MD5() in both servers, which MySQL 9.6+ lacks as
// installed: refused there, with the statement that adds it. (A MariaDB and
// MySQL pair is refused end to end: TestMixedFlavorsRefused.)
func TestCheckFlavorsAndFunctions(t *testing.T) {
	_, c := checkEnv(t, "move", "chk_fn", "CREATE TABLE t (id INT PRIMARY KEY)")
	src, p := c.Src, c.Plan
	if err := runCheck(t, "server flavors and functions", c); err != nil {
		t.Fatalf("a move between servers of one flavor: %v", err)
	}
	p.Operation = "split"
	p.Copy[0].Filter = keyspace.Filter{Column: "id", Arcs: []keyspace.Arc{{After: "00000000000000000000000000000000", Upto: "80000000000000000000000000000000"}}}
	err := runCheck(t, "server flavors and functions", c)
	var md5 string
	if src.QueryRowContext(context.Background(), "SELECT MD5('')").Scan(&md5) == nil {
		if err != nil {
			t.Fatalf("a HASH split where the servers have MD5(): %v", err)
		}
		t.Log("the servers have MD5(): the refusal is not reachable on this flavor")
		return
	}
	checktest.WantRefused(t, err, "lacks a function that the hash ranges")
}
