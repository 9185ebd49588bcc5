package keyspace

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// A key list printed in advice parses back to the same keys: runs for
// consecutive INT keys, quotes for string keys a shell would split.
func TestKeyListArgRoundTrip(t *testing.T) {
	ints := func(vs ...int64) []Key {
		var ks []Key
		for _, v := range vs {
			ks = append(ks, IntK(v))
		}
		return ks
	}
	var many []Key
	for v := int64(1000000); v < 1000600; v++ {
		many = append(many, IntK(v))
	}
	for _, c := range []struct {
		keys []Key
		want string
	}{
		{ints(5), "5"},
		{ints(7, 5, 6), "5..7"},
		{ints(1, 2, 4, 5, 6, 9), "1,2,4..6,9"},
		{ints(-3, -2, -1, 0), "-3..0"},
		{many, "1000000..1000599"},
		{[]Key{StrK("acme"), StrK("b c")}, "'acme,b c'"},
		{[]Key{StrK("o'neil")}, `'o'\''neil'`},
	} {
		got := KeyListArg(c.keys)
		if got != c.want {
			t.Errorf("KeyListArg(%v) = %s, want %s", c.keys, got, c.want)
		}
		if c.keys[0].Type != IntKey {
			continue // the shell removes the quotes; the rest is the ints' round trip
		}
		back, err := ParseKeyList(strings.Split(got, ","), IntKey)
		if err != nil || fmt.Sprint(back) != fmt.Sprint(mustParse(t, strs(c.keys))) {
			t.Errorf("ParseKeyList(%s) = %v %v, want %v", got, back, err, c.keys)
		}
	}
}

func strs(ks []Key) []string {
	var s []string
	for _, k := range ks {
		s = append(s, k.String())
	}
	return s
}

// Bad runs are refused with what a run needs; a STRING key with ".." is a key.
func TestParseKeyListRefusals(t *testing.T) {
	for _, in := range []string{"5..3", "1..x", "x..1", "0..1000000", ""} {
		if _, err := ParseKeyList([]string{in}, IntKey); err == nil {
			t.Errorf("ParseKeyList(%q) accepted", in)
		}
	}
	if ks, err := ParseKeyList([]string{"a..b"}, StringKey); err != nil || len(ks) != 1 || ks[0].Str != "a..b" {
		t.Errorf("string key a..b: %v %v", ks, err)
	}
	if ks, err := ParseKeyList([]string{"9223372036854775806..9223372036854775807"}, IntKey); err != nil || len(ks) != 2 {
		t.Errorf("a run to the largest INT key: %v %v", ks, err)
	}
}

func mustParse(t *testing.T, in []string) []Key {
	t.Helper()
	ks, err := ParseKeyList(in, IntKey)
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

// A key list round-trips in its order: INT keys as a string of runs, STRING
// keys as an array; the array form of plans made before is read too.
func TestKeyListJSON(t *testing.T) {
	for _, c := range []struct {
		keys KeyList
		want string
	}{
		{KeyList{IntK(1), IntK(2), IntK(3), IntK(5), IntK(-7), IntK(-6), IntK(9)}, `"1..3,5,-7..-6,9"`},
		{KeyList{IntK(1<<63 - 1), IntK(-1 << 63), IntK(0)}, `"9223372036854775807,-9223372036854775808,0"`},
		{KeyList{StrK("a,b"), StrK("c..d")}, `[{"Type":"STRING","Int":0,"Str":"a,b"},{"Type":"STRING","Int":0,"Str":"c..d"}]`},
	} {
		b, err := json.Marshal(c.keys)
		if err != nil || string(b) != c.want {
			t.Fatalf("%v: %s %v, want %s", c.keys, b, err, c.want)
		}
		var back KeyList
		if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, c.keys) {
			t.Fatalf("%s read back as %v (%v)", b, back, err)
		}
	}
	var old Filter
	if err := json.Unmarshal([]byte(`{"column":"k","points":[{"Type":"INT","Int":4,"Str":""},{"Type":"INT","Int":2,"Str":""}]}`), &old); err != nil || !reflect.DeepEqual(old.Points, KeyList{IntK(4), IntK(2)}) {
		t.Fatalf("the array form: %v (%v)", old.Points, err)
	}
	var bad KeyList
	if err := json.Unmarshal([]byte(`"3..1"`), &bad); err == nil {
		t.Fatalf("a run backwards was read: %v", bad)
	}
}

// KeysFlag gives a key move's flag only where one names the keys exactly:
// points, or bounded ranges; an open range or a hash arc has none.
func TestKeysFlag(t *testing.T) {
	lo, hi := IntK(10), IntK(20)
	cases := []struct {
		f    Filter
		want string
		ok   bool
	}{
		{Filter{Column: "c", Points: KeyList{IntK(1), IntK(2), IntK(3), IntK(7)}}, "--keys 1..3,7", true},
		{Filter{Column: "c", Ranges: []Range{{Lo: &lo, Hi: &hi}}}, "--range 10:20", true},
		{Filter{Column: "c", Ranges: []Range{{Lo: &lo}}}, "", false},
		{Filter{Column: "c", Arcs: []Arc{{After: "a", Upto: "b"}}}, "", false},
	}
	for _, c := range cases {
		got, ok := KeysFlag(c.f)
		if got != c.want || ok != c.ok {
			t.Errorf("KeysFlag(%+v) = %q, %v; want %q, %v", c.f, got, ok, c.want, c.ok)
		}
	}
}
