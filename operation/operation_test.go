package operation

import "testing"

// The properties the pipeline asks are those each operation had when they
// were string branches: a move takes the whole schema, a merge goes into a
// shard that keeps its keys, a split divides keys; all three have a window.
func TestRegistry(t *testing.T) {
	seen := map[string]bool{}
	for _, o := range All() {
		if seen[o.Name] || o.Name == "" {
			t.Errorf("operation %q registered twice or unnamed", o.Name)
		}
		seen[o.Name] = true
		if !Known(o.Name) || Of(o.Name) != o {
			t.Errorf("Of(%q) = %+v, want %+v", o.Name, Of(o.Name), o)
		}
	}
	for _, n := range []string{Move, Split, Merge} {
		if !seen[n] {
			t.Errorf("%s is not registered", n)
		}
	}
	if m := Of(Move); !m.WholeSchema || m.IntoExisting || m.DividesKeys || !m.ReverseWindow {
		t.Errorf("move: %+v", m)
	}
	if s := Of(Split); s.WholeSchema || s.IntoExisting || !s.DividesKeys || !s.ReverseWindow {
		t.Errorf("split: %+v", s)
	}
	if m := Of(Merge); m.WholeSchema || !m.IntoExisting || m.DividesKeys || !m.ReverseWindow {
		t.Errorf("merge: %+v", m)
	}
	if u := Of("resize"); Known("resize") || u != (Op{Name: "resize"}) {
		t.Errorf("an unknown operation: %+v", u)
	}
}
