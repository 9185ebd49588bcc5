package verify

import (
	"testing"

	"github.com/shardctl/shardctl/chunk"
)

// A document's spellings on the two flavors compare equal; different
// documents do not.
func TestCanonicalJSON(t *testing.T) {
	for _, same := range [][2]string{
		{`{"k": 7, "tags": ["a", "ü"]}`, `{"tags":["a","ü"],"k":7}`},
		{`{"a": 1.0}`, `{"a":1}`},
		{`{"a": 1e2, "b": 0.5}`, `{"b":0.5,"a":100}`},
		{`[1, {"x": null}]`, `[1,{"x":null}]`},
		{`not json`, `not json`},
	} {
		if a, b := string(canonicalJSON([]byte(same[0]))), string(canonicalJSON([]byte(same[1]))); a != b {
			t.Errorf("%s -> %s, %s -> %s: want equal", same[0], a, same[1], b)
		}
	}
	for _, differ := range [][2]string{{`{"a": 1}`, `{"a": 2}`}, {`{"a": "1"}`, `{"a": 1}`}, {`[1, 2]`, `[2, 1]`}, {`{"big": 9007199254740993}`, `{"big": 9007199254740992}`}} {
		if a, b := string(canonicalJSON([]byte(differ[0]))), string(canonicalJSON([]byte(differ[1]))); a == b {
			t.Errorf("%s and %s both -> %s: want different", differ[0], differ[1], a)
		}
	}
}

// Only a cross-flavor pair with a JSON column leaves the SQL checksum.
func TestJSONColumnsHashedInGoAcrossFlavorsOnly(t *testing.T) {
	cols := []chunk.Column{{Name: "id", Type: "INT"}, {Name: "doc", Type: "JSON"}}
	text := []chunk.Column{{Name: "id", Type: "INT"}, {Name: "doc", Type: "LONGTEXT"}}
	if jsonCols(false, cols, cols) != nil {
		t.Error("same flavor: hashed in Go")
	}
	for _, pair := range [][2][]chunk.Column{{cols, text}, {text, cols}} {
		if m := jsonCols(true, pair[0], pair[1]); len(m) != 2 || m[0] || !m[1] {
			t.Errorf("cross flavor: %v", m)
		}
	}
	if jsonCols(true, text, text) != nil {
		t.Error("cross flavor without JSON: hashed in Go")
	}
}
