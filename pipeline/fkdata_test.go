package pipeline

import (
	"context"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/tables"
)

// A split's check of a foreign key without the shard key reads every child
// row, in chunks joined on several sessions at once: crossings planted in
// the first, a middle and the very last row are all counted, every row is
// counted once, the rows named are the first ones in key order, and the
// pace is asked once per chunk.
func TestKeyCheckReadsEveryChunk(t *testing.T) {
	env := testenv.Get(t)
	db := env.DB(t, 1, "")
	const children = 2*keyCheckChunk + 1 // three chunks, the last of one row
	testenv.Schema(t, db, "fkrows",
		"CREATE TABLE rentals (rental_id INT NOT NULL PRIMARY KEY, emp_no INT NOT NULL, KEY (emp_no))",
		"CREATE TABLE payments (payment_id INT NOT NULL PRIMARY KEY, emp_no INT NOT NULL, rental_id INT NULL, KEY (emp_no),"+
			" CONSTRAINT fk_pr FOREIGN KEY (rental_id) REFERENCES rentals (rental_id))",
		// 1..1,000,000 from digits: the same statements on both flavors.
		"CREATE TABLE d (d INT NOT NULL PRIMARY KEY)",
		"INSERT INTO d VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9)",
		"CREATE VIEW n AS SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d + 100000 * g.d + 1 AS seq FROM d a, d b, d c, d e, d f, d g",
		"INSERT INTO rentals SELECT seq, seq % 1000 FROM n WHERE seq <= 60000",
		"INSERT INTO payments SELECT seq, ((seq % 60000) + 1) % 1000, (seq % 60000) + 1 FROM n WHERE seq <= 100001",
		// Crossings: the child's employee on the other side of 500 from its rental's.
		"UPDATE payments SET emp_no = IF(emp_no >= 500, 1, 999) WHERE payment_id IN (7, 60000, 100001)")
	ts, err := tables.Inspect(context.Background(), db, "fkrows")
	if err != nil {
		t.Fatal(err)
	}
	at := keyspace.IntK(500)
	for i := range ts {
		ts[i].Sharded, ts[i].ShardColumn = true, "emp_no"
		ts[i].Filter = keyspace.Filter{Column: "emp_no", Ranges: []keyspace.Range{{Lo: &at}}}
	}
	p := plans.New("split", "")
	p.Source = plans.Endpoint{ShardID: 1, Host: env.Addr(1).Host, Port: env.Addr(1).Port, Schema: "fkrows"}
	p.Copy = ts
	paced := 0
	checks, crossing, err := checkKeysOnData(context.Background(), db, p, "planning", func(context.Context, int) error { paced++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(checks) != 1 || checks[0].Rows != children || checks[0].Leaving+checks[0].Orphaned != 3 {
		t.Fatalf("key checks: %+v", checks)
	}
	if paced != 3 {
		t.Errorf("the pace was asked %d times for 3 chunks", paced)
	}
	i7, i60k, ilast := strings.Index(crossing, "=(7)"), strings.Index(crossing, "=(60000)"), strings.Index(crossing, "=(100001)")
	if i7 < 0 || i60k < i7 || ilast < i60k {
		t.Fatalf("the rows named, in key order: %s", crossing)
	}
}
