package tables

import (
	"strings"
	"testing"
)

func names(ts []Table) string {
	var s []string
	for _, t := range ts {
		s = append(s, t.Name)
	}
	return strings.Join(s, ",")
}

func TestDeleteOrderChildrenFirst(t *testing.T) {
	ts := []Table{{Name: "customers"}, {Name: "items"}, {Name: "orders"}, {Name: "payments"}, {Name: "regions"}}
	fks := []ForeignKey{
		{Name: "a", Table: "orders", RefSchema: "s", RefTable: "customers"},
		{Name: "b", Table: "items", RefSchema: "s", RefTable: "orders"},
		{Name: "c", Table: "payments", RefSchema: "s", RefTable: "orders"},
		{Name: "d", Table: "customers", RefSchema: "s", RefTable: "regions"},
		{Name: "e", Table: "customers", RefSchema: "s", RefTable: "customers"}, // self-reference
	}
	got := names(DeleteOrder(ts, fks, "s"))
	pos := map[string]int{}
	for i, n := range strings.Split(got, ",") {
		pos[n] = i
	}
	if len(pos) != 5 {
		t.Fatalf("order %s lost tables", got)
	}
	for _, k := range fks {
		if k.Table != k.RefTable && pos[k.Table] > pos[k.RefTable] {
			t.Errorf("order %s deletes parent %s before child %s", got, k.RefTable, k.Table)
		}
	}
}

func TestDeleteOrderCycleKeepsEveryTable(t *testing.T) {
	ts := []Table{{Name: "a"}, {Name: "b"}}
	fks := []ForeignKey{{Table: "a", RefSchema: "s", RefTable: "b"}, {Table: "b", RefSchema: "s", RefTable: "a"}}
	if got := names(DeleteOrder(ts, fks, "s")); len(got) != 3 {
		t.Fatalf("got %q", got)
	}
}

func TestCrossingKeys(t *testing.T) {
	ts := []Table{
		{Name: "customers", Sharded: true, ShardColumn: "cid"},
		{Name: "orders", Sharded: true, ShardColumn: "cid"},
		{Name: "notes", Sharded: true, ShardColumn: "cid"},
		{Name: "countries"},
		{Name: "promo"},
	}
	fks := []ForeignKey{
		{Name: "ok1", Table: "orders", Columns: []string{"cid"}, RefSchema: "s", RefTable: "customers", RefColumns: []string{"cid"}},
		{Name: "ok2", Table: "customers", Columns: []string{"country"}, RefSchema: "s", RefTable: "countries", RefColumns: []string{"code"}},
		{Name: "bad1", Table: "promo", Columns: []string{"cid"}, RefSchema: "s", RefTable: "customers", RefColumns: []string{"cid"}},
		{Name: "bad2", Table: "notes", Columns: []string{"order_id"}, RefSchema: "s", RefTable: "orders", RefColumns: []string{"id"}},
		{Name: "bad3", Table: "orders", Columns: []string{"x"}, RefSchema: "other", RefTable: "t", RefColumns: []string{"x"}},
	}
	refused, onData := CrossingKeys(ts, fks, "s", "split")
	if len(refused) != 2 || !strings.Contains(refused[0], "bad1") || !strings.Contains(refused[1], "bad3") {
		t.Fatalf("split refused: %q", refused)
	}
	if len(onData) != 1 || onData[0].Name != "bad2" {
		t.Fatalf("split checks on the data: %v", onData)
	}
	// A merge keeps every child with its parent: only the global -> sharded
	// key and the other schema are refused, and no row is read.
	refused, onData = CrossingKeys(ts, fks, "s", "merge")
	if len(refused) != 2 || !strings.Contains(refused[0], "bad1") || !strings.Contains(refused[1], "bad3") || len(onData) != 0 {
		t.Fatalf("merge: %q %v", refused, onData)
	}
	if refused, onData := CrossingKeys(ts, fks, "s", "move"); len(refused) != 1 || !strings.Contains(refused[0], "another schema") || len(onData) != 0 {
		t.Fatalf("move: %q %v", refused, onData)
	}
}
