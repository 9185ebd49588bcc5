package binlog

import (
	"strings"
	"testing"

	"github.com/pingcap/tidb/pkg/parser"

	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/tables"
)

func TestCarryDecidesWhatIsSafe(t *testing.T) {
	listed := map[string]*tables.Table{
		"emp":   {Name: "emp", Columns: []string{"id", "shard_key", "name"}, PK: []string{"id"}, ShardColumn: "shard_key"},
		"moved": {Name: "moved", Columns: []string{"id", "k"}, PK: []string{"id"}, Filter: keyspace.Filter{Column: "k"}},
	}
	p := parser.New()
	for _, c := range []struct{ q, why string }{
		{"ALTER TABLE emp ADD COLUMN note VARCHAR(20) DEFAULT 'x'", ""},
		{"ALTER TABLE `s3`.`emp` ADD INDEX by_name (name), ALGORITHM=INPLACE, LOCK=NONE", ""},
		{"CREATE INDEX by_name ON emp (name)", ""},
		{"DROP INDEX by_name ON s3.emp", ""},
		{"ALTER TABLE emp MODIFY name VARCHAR(200) NOT NULL", ""},
		{"ALTER TABLE emp DROP COLUMN name", ""},
		{"ALTER TABLE emp DROP COLUMN shard_key", "sharding column shard_key"},
		{"ALTER TABLE moved MODIFY k BIGINT", "sharding column k"},
		{"ALTER TABLE emp CHANGE id id2 BIGINT", "primary key column id"},
		{"ALTER TABLE emp DROP PRIMARY KEY, ADD PRIMARY KEY (id, name)", "primary key"},
		{"ALTER TABLE emp ADD COLUMN id3 INT PRIMARY KEY", "primary key"},
		{"ALTER TABLE emp RENAME TO emp2", "RENAME"},
		{"RENAME TABLE emp TO emp2", "RENAME"},
		{"DROP TABLE emp", "other than ALTER TABLE"},
		{"ALTER TABLE other.emp ADD COLUMN c INT", "does not copy"},
		{"ALTER TABLE unlisted ADD COLUMN c INT", "does not copy"},
		{"ALTER TABLE emp PARTITION BY HASH(id) PARTITIONS 4", "does not carry"},
	} {
		tb, why := carry(p, c.q, "s3", "s3", listed)
		switch {
		case c.why == "" && (why != "" || tb == nil):
			t.Errorf("%s: refused (%s), want carried", c.q, why)
		case c.why != "" && !strings.Contains(why, c.why):
			t.Errorf("%s: %q, want a refusal naming %q", c.q, why, c.why)
		}
	}
}

func TestRetargetRequalifiesOnlyTheSourceSchema(t *testing.T) {
	for _, c := range [][2]string{
		{"ALTER TABLE s3.emp ADD c INT", "ALTER TABLE `t9`.emp ADD c INT"},
		{"ALTER TABLE `s3` . `emp` ADD COLUMN `s3` INT COMMENT 's3.emp'", "ALTER TABLE `t9` . `emp` ADD COLUMN `s3` INT COMMENT 's3.emp'"},
		{"ALTER TABLE emp ADD FOREIGN KEY (d) REFERENCES s3.dept (id)", "ALTER TABLE emp ADD FOREIGN KEY (d) REFERENCES `t9`.dept (id)"},
		{"ALTER TABLE s30.emp ADD c INT", "ALTER TABLE s30.emp ADD c INT"},
	} {
		if got := retarget(c[0], "s3", "t9"); got != c[1] {
			t.Errorf("retarget(%q) = %q, want %q", c[0], got, c[1])
		}
	}
}
