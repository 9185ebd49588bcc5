package e2e

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/sandbox"
)

// addSalaries gives tenant key n more salaries rows in schema (dates before
// any the seed writes, so no key collides).
func addSalaries(t *testing.T, db *sql.DB, schema string, key int64, n int) {
	t.Helper()
	for done := 0; done < n; {
		var vals []string
		for ; done < n && len(vals) < 500; done++ {
			vals = append(vals, fmt.Sprintf("(%d, 50000, DATE_ADD('1800-01-01', INTERVAL %d DAY), '9999-01-01')", key, done))
		}
		if _, err := db.Exec("INSERT INTO " + dbutil.Table(schema, "salaries") + " (emp_no, salary, from_date, to_date) VALUES " + strings.Join(vals, ", ")); err != nil {
			t.Fatal(err)
		}
	}
}

// keyRows counts tenant key's rows over the sharded tables of schema.
func keyRows(t *testing.T, db *sql.DB, schema string, key int64) int64 {
	t.Helper()
	var total int64
	for _, tb := range sandbox.ShardedTables {
		var n int64
		if err := db.QueryRow("SELECT COUNT(*) FROM "+dbutil.Table(schema, tb)+" WHERE emp_no = ?", key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		total += n
	}
	return total
}

type keyStatusOut struct {
	Keys []struct {
		Function string `json:"function"`
		Key      string `json:"key"`
		ShardID  int    `json:"shard_id"`
		Server   string `json:"server"`
		Rows     int64  `json:"rows"`
		Status   string `json:"status"`
	} `json:"keys"`
}

// status --keys counts named tenants where the map routes them; --top ranks
// the fleet's biggest tenants; bad input is refused with exit 2.
func TestStatusKeysAndTop(t *testing.T) {
	c := newClusterSeed(t, "e2e_stkeys", []int{1, 2}, sandbox.SeedConfig{Sizes: []int{100, 100}, List: true})
	s1, s2 := c.shards[0], c.shards[1]
	addSalaries(t, c.db(1), s1.Schema, 50, 40)
	heavy := keyRows(t, c.db(1), s1.Schema, 50)
	other := s2.Lower + 7
	otherRows := keyRows(t, c.db(2), s2.Schema, other)

	var out keyStatusOut
	r := c.mustRun("status", "--keys", fmt.Sprintf("50,%d", other), "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if len(out.Keys) != 2 || out.Keys[0].Key != "50" || out.Keys[0].Rows != heavy || out.Keys[0].ShardID != s1.ShardID || out.Keys[0].Server != c.env.Addr(1).String() ||
		out.Keys[1].Rows != otherRows || out.Keys[1].ShardID != s2.ShardID || out.Keys[1].Status != "online" {
		t.Fatalf("status --keys: want key 50 with %d rows on shard %d, key %d with %d on shard %d\n%s", heavy, s1.ShardID, other, otherRows, s2.ShardID, r.stdout)
	}
	out = keyStatusOut{}
	r = c.mustRun("status", "--top", "3", "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if len(out.Keys) != 3 || out.Keys[0].Key != "50" || out.Keys[0].Rows != heavy || out.Keys[0].Function != "employees" || out.Keys[1].Rows > heavy || out.Keys[2].Rows > out.Keys[1].Rows {
		t.Fatalf("status --top 3: want key 50 (%d rows) first, then lighter\n%s", heavy, r.stdout)
	}
	r = c.mustRun("status", "--top", "1")
	if !strings.Contains(r.stdout, "FUNCTION") || !strings.Contains(r.stdout, fmt.Sprintf("employees  50   %d", heavy)) {
		t.Errorf("status --top 1 text:\n%s", r.stdout)
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--top", "0"}, "1 or more"},
		{[]string{"--keys", "5", "--top", "2"}, "not both"},
		{[]string{"--keys", "99999999"}, "no shard holds it"},
		{[]string{"--keys", "x"}, "not a signed 64-bit integer"},
		{[]string{"--keys", "5", "--function", "nope"}, "nope"},
	} {
		res := c.run(nil, append([]string{"status"}, bad.args...)...)
		if res.code != 2 || !strings.Contains(res.stderr, bad.want) {
			t.Errorf("status %v: exit %d, want 2 with %q\n%s", bad.args, res.code, bad.want, res.stderr)
		}
	}
}
