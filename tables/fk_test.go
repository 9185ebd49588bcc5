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
	got := CrossingKeys(ts, fks, "s", false)
	if len(got) != 3 || !strings.Contains(got[0], "bad1") || !strings.Contains(got[1], "bad2") || !strings.Contains(got[2], "bad3") {
		t.Fatalf("split: %q", got)
	}
	if got := CrossingKeys(ts, fks, "s", true); len(got) != 1 || !strings.Contains(got[0], "another schema") {
		t.Fatalf("move: %q", got)
	}
}
