package shardmap

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/keyspace"
)

func TestParsePointsCSV(t *testing.T) {
	in := "key,shard\n# a comment\n1,2\n\n 3 , 4\n\"a,b\",5\n"
	got, err := ParsePoints(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []PointLine{{Line: 3, Key: "1", Shard: 2}, {Line: 5, Key: " 3 ", Shard: 4}, {Line: 6, Key: "a,b", Shard: 5}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParsePoints = %+v, want %+v", got, want)
	}
	for in, line := range map[string]string{
		"1,2\n3\n":        "line 2: 1 fields",
		"1,2\n3,x\n":      "line 2: shard \"x\"",
		"1,2\n\n4,0\n":    "line 3: shard \"0\"",
		"1,2\n\"3,4\n":    "line 2:",
		"1,2\n5,6,7\n8,9": "line 2: 3 fields",
	} {
		_, err := ParsePoints(strings.NewReader(in))
		if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), line) {
			t.Errorf("ParsePoints(%q) = %v, want a refusal naming %q", in, err, line)
		}
	}
}

// The JSON of 'shardmap show -o json' is read back, each point named by
// the line its object starts on, its function by name.
func TestParsePointsJSON(t *testing.T) {
	k1, k2, lo := keyspace.IntK(7), keyspace.IntK(8), keyspace.IntK(0)
	m := &Map{Version: 3, Locations: []Location{{ShardID: 1}, {ShardID: 2}},
		Functions: []Function{{ID: 1, Name: "emp", Type: Range}, {ID: 2, Name: "tenants", Type: List, KeyType: keyspace.IntKey}},
		Mappings: []Mapping{{FuncID: 1, Kind: Range, Lower: &lo, ShardID: 1, Status: Online},
			{FuncID: 2, Kind: List, Point: &k1, ShardID: 1, Status: Online}, {FuncID: 2, Kind: List, Point: &k2, ShardID: 2, Status: Offline}}}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(m); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	got, err := ParsePoints(&b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Key != "7" || got[0].Shard != 1 || got[1].Key != "8" || got[1].Shard != 2 || got[0].Func != "tenants" {
		t.Fatalf("ParsePoints = %+v", got)
	}
	for _, p := range got {
		if l := lines[p.Line-1]; strings.TrimSpace(l) != "{" {
			t.Errorf("key %s: line %d is %q, want the line its object opens", p.Key, p.Line, l)
		}
	}
	if _, err := ParsePoints(strings.NewReader("{\"mappings\": [\n{\"kind\": \"LIST\"}]}")); !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("a point without a key: %v", err)
	}
}

func TestPlanImport(t *testing.T) {
	k1, k2 := keyspace.IntK(1), keyspace.IntK(2)
	f := Function{ID: 2, Name: "tenants", Type: List, KeyType: keyspace.IntKey}
	m := &Map{Locations: []Location{{ShardID: 1}, {ShardID: 2}}, Functions: []Function{f},
		Mappings: []Mapping{{FuncID: 2, Kind: List, Point: &k1, ShardID: 1, Status: Online}, {FuncID: 2, Kind: List, Point: &k2, ShardID: 1, Status: Online}}}
	im, err := m.PlanImport(f, []PointLine{{Line: 1, Key: "1", Shard: 1}, {Line: 2, Key: "2", Shard: 2}, {Line: 3, Key: "3", Shard: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if im.Counts() != "1 added, 1 re-pointed, 1 unchanged" || im.Repointed[0].From != 1 || im.Added[0].Key != "3" {
		t.Errorf("PlanImport = %+v", im)
	}
	if sh := im.Shards(); len(sh) != 2 || sh[1].Line != 2 || sh[2].Line != 2 {
		t.Errorf("Shards = %+v", sh)
	}
	for _, c := range []struct {
		ps   []PointLine
		want string
	}{
		{[]PointLine{{Line: 4, Key: "x", Shard: 1}}, "line 4: key \"x\" is not"},
		{[]PointLine{{Line: 4, Key: "5", Shard: 9}}, "line 4: unknown shard 9"},
		{[]PointLine{{Line: 4, Key: "5", Shard: 1}, {Line: 9, Key: " 5", Shard: 2}}, "line 9: key 5 is on line 4 already"},
		{[]PointLine{{Line: 4, Key: "5", Shard: 1, Func: "other"}}, "--function other"},
	} {
		if _, err := m.PlanImport(f, c.ps); !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("PlanImport(%+v) = %v, want %q", c.ps, err, c.want)
		}
	}
	if _, err := m.ImportFunction("", nil); err != nil {
		t.Errorf("the only LIST function: %v", err)
	}
}

func TestGroupByShard(t *testing.T) {
	var ms []Mapping
	for i, sh := range []int{2, 1, 1, 2, 1} {
		k := keyspace.IntK(int64(i + 1))
		ms = append(ms, Mapping{Kind: List, Point: &k, ShardID: sh, Status: Online})
	}
	var got []string
	for _, g := range GroupByShard(ms) {
		got = append(got, Summary(g))
	}
	if want := []string{"keys 2-3,5 (3 keys)", "keys 1,4 (2 keys)"}; !reflect.DeepEqual(got, want) {
		t.Errorf("groups = %q, want %q", got, want)
	}
}
