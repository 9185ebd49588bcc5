package layout

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestReadmeLayoutListsEveryPackage keeps the README's Layout section true:
// its list is generated from the packages' doc comments (one line per
// top-level package directory, internal/ counted as a level, its
// sub-packages named on the same line), so a package added, removed or
// re-described without the README fails here with the list to paste.
func TestReadmeLayoutListsEveryPackage(t *testing.T) {
	root := filepath.Join("..", "..")
	want := layoutList(t, root)
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	got := readmeLayout(string(b))
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("README.md's ## Layout list does not match the packages' doc comments; replace it with:\n\n%s\n\n(README has %d entries, the tree %d)",
			strings.Join(want, "\n"), len(got), len(want))
	}
}

// readmeLayout returns the list items of the README's "## Layout" section.
func readmeLayout(readme string) []string {
	var items []string
	in := false
	for _, line := range strings.Split(readme, "\n") {
		if strings.HasPrefix(line, "## ") {
			in = line == "## Layout"
			continue
		}
		if in && strings.HasPrefix(line, "- ") {
			items = append(items, line)
		}
	}
	return items
}

// layoutList is the Layout section's list as the tree says it should be.
func layoutList(t *testing.T, root string) []string {
	t.Helper()
	dirs := map[string][]string{} // top-level directory -> its sub-packages
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if !d.IsDir() || rel == "." {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "bin" {
			return filepath.SkipDir
		}
		if !hasGo(t, path) {
			return nil
		}
		top := topDir(rel)
		if top == rel {
			if _, ok := dirs[top]; !ok {
				dirs[top] = nil
			}
		} else {
			dirs[top] = append(dirs[top], rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(dirs))
	for d := range dirs {
		names = append(names, d)
	}
	sort.Strings(names)
	var out []string
	for _, d := range names {
		line := "- `" + d + "/`: " + packageSummary(t, filepath.Join(root, filepath.FromSlash(d)), d)
		if subs := dirs[d]; len(subs) > 0 {
			sort.Strings(subs)
			for i, s := range subs {
				subs[i] = "`" + s + "`"
			}
			line += " Sub-packages: " + strings.Join(subs, ", ") + "."
		}
		out = append(out, line)
	}
	return out
}

// topDir is the directory a README line names: the first path element, or
// the first two under internal/ (which holds no package of its own).
func topDir(rel string) string {
	parts := strings.Split(rel, "/")
	if parts[0] == "internal" && len(parts) > 1 {
		return parts[0] + "/" + parts[1]
	}
	return parts[0]
}

func hasGo(t *testing.T, dir string) bool {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	return len(m) > 0
}

// packageSummary is the first clause of the package's doc comment (up to its
// first colon, semicolon or full stop), without "Package x" and "is": short
// enough for one README line. A non-test file's comment wins over a test
// file's; a package with none fails the test.
func packageSummary(t *testing.T, dir, rel string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(m, func(i, j int) bool { // non-test files first
		ti, tj := strings.HasSuffix(m[i], "_test.go"), strings.HasSuffix(m[j], "_test.go")
		if ti != tj {
			return !ti
		}
		return m[i] < m[j]
	})
	for _, path := range m {
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc == nil {
			continue
		}
		text := strings.Join(strings.Fields(f.Doc.Text()), " ")
		text = strings.TrimPrefix(text, "Package "+f.Name.Name+" ")
		text = strings.TrimPrefix(text, "is ")
		if i := strings.IndexAny(text, ":;"); i >= 0 {
			text = text[:i]
		}
		if i := strings.Index(text, ". "); i >= 0 {
			text = text[:i]
		}
		return strings.TrimSuffix(text, ".") + "."
	}
	t.Errorf("%s has no package doc comment (// Package x ...): the README's Layout line is made from it", rel)
	return "(no doc comment)"
}
