package pipeline

import (
	"strings"
	"testing"

	"github.com/shardctl/shardctl/internal/testenv"
)

// A merge whose target counter lies below the merged shard's ids is refused
// (the copy would drag the target's counter among them), naming the table and
// the ALTER that fixes it; a target counter above them, or servers that
// interleave ids, are accepted; a table without a counter is not read.
func TestCheckMergeCountersApart(t *testing.T) {
	const name = "merge counters apart"
	ddl := "CREATE TABLE tickets (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, emp_no INT NOT NULL)"
	// Not read: a counter inside a key that has the shard column (two
	// shards' rows never meet on it), and a MyISAM table without a counter
	// (MySQL 9 reports AUTO_INCREMENT 1 for it all the same).
	others := []string{"CREATE TABLE plain (id INT PRIMARY KEY)",
		"CREATE TABLE per_emp (emp_no INT NOT NULL, seq INT NOT NULL AUTO_INCREMENT, PRIMARY KEY (emp_no, seq), KEY (seq))",
		"CREATE TABLE log (emp_no INT NOT NULL, seq INT NOT NULL, PRIMARY KEY (emp_no, seq)) ENGINE=MyISAM"}
	env, c := checkEnv(t, "merge", "chk_ctr", append([]string{ddl,
		"INSERT INTO tickets VALUES (1000001, 1000001)", "ALTER TABLE tickets AUTO_INCREMENT = 1000001000"}, append(others,
		"ALTER TABLE per_emp AUTO_INCREMENT = 1000001000")...)...)
	for i := range c.Plan.Copy {
		c.Plan.Copy[i].Sharded, c.Plan.Copy[i].ShardColumn = true, "emp_no"
	}
	dst := env.DB(t, 2, "")
	testenv.Schema(t, dst, "chk_ctr", append([]string{ddl, "INSERT INTO tickets VALUES (1, 1)"}, others...)...)
	err := runCheck(t, name, c)
	wantRefused(t, err, "tickets (the merged shard's counter 1000001000, the target's 2")
	wantRefused(t, err, "ALTER TABLE `chk_ctr`.`tickets` AUTO_INCREMENT = N")
	if strings.Contains(err.Error(), "per_emp") || strings.Contains(err.Error(), "log (") {
		t.Fatalf("a table whose ids cannot meet was named: %v", err)
	}

	// Servers that interleave ids: the target never issues one of the merged shard's.
	setGlobal(t, c.Src, "auto_increment_increment", 2)
	setGlobal(t, dst, "auto_increment_increment", 2)
	setGlobal(t, c.Src, "auto_increment_offset", 1)
	setGlobal(t, dst, "auto_increment_offset", 2)
	if err := runCheck(t, name, c); err != nil {
		t.Fatalf("interleaved ids: %v", err)
	}
	setGlobal(t, dst, "auto_increment_offset", 1)
	wantRefused(t, runCheck(t, name, c), "tickets (")

	// The target's counter raised above every id the merged shard issues.
	testenv.Exec(t, dst, "ALTER TABLE chk_ctr.tickets AUTO_INCREMENT = 2000002000")
	if err := runCheck(t, name, c); err != nil {
		t.Fatalf("the target's counter above the merged shard's: %v", err)
	}
}
