// Package layout checks the house rules of the source tree: only cmd/ (and
// main.go) know the command-line libraries, cmd/ knows no SQL, plans/ links
// no database, no file grows past maxLines, and operations are named only in
// their registry.
package layout

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/operation"
)

var cliOnly = []string{"github.com/spf13/cobra", "github.com/spf13/viper", "github.com/schollz/progressbar"}

func TestOnlyCmdKnowsTheCommandLine(t *testing.T) {
	goFiles(t, true, func(rel, path string) {
		if rel == "main.go" || strings.HasPrefix(rel, "cmd/") {
			return
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			for _, banned := range cliOnly {
				if p == banned || strings.HasPrefix(p, banned+"/") {
					t.Errorf("%s imports %s: only cmd/ may (domain packages report through small interfaces that cmd renders)", rel, p)
				}
			}
		}
	})
}

// TestPlansNeedNoDatabase keeps plans/ a leaf: a program that reads and
// prints a plan links no SQL package and no driver. Value types a plan holds
// live in packages without a database (shardmap/mapdef, tables/tabledef,
// schemaobj/objdef, dbutil/ident).
func TestPlansNeedNoDatabase(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/shardctl/shardctl/plans").Output()
	if err != nil {
		t.Fatalf("go list -deps ./plans: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list gave only %d packages: %q", len(deps), out)
	}
	for _, d := range deps {
		if d == "database/sql" || d == "database/sql/driver" || d == "github.com/go-sql-driver/mysql" || strings.HasPrefix(d, "github.com/go-sql-driver/mysql/") {
			t.Errorf("plans depends on %s: move the value type that pulls it in to a package without a database", d)
		}
	}
}

// goFiles calls fn for every Go file of the repository (test files only
// with tests), with its path relative to the root (slash-separated), and
// fails the test unless it saw a repository.
func goFiles(t *testing.T, tests bool, fn func(rel, path string)) {
	t.Helper()
	root := filepath.Join("..", "..")
	n := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && (tests || !strings.HasSuffix(path, "_test.go")) {
			n++
			fn(filepath.ToSlash(rel), path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 50 {
		t.Fatalf("saw only %d files: is the walk rooted at the repository?", n)
	}
}

// TestCmdKnowsNoSQL: cmd/ parses, calls a domain function and renders; the
// statements live in domain packages.
func TestCmdKnowsNoSQL(t *testing.T) {
	goFiles(t, false, func(rel, path string) {
		if !strings.HasPrefix(rel, "cmd/") {
			return
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "database/sql" {
				t.Errorf("%s imports database/sql: move the queries into a domain package that cmd calls", rel)
			}
		}
	})
}

// maxLines is the longest a non-test source file may be: past it a file
// holds more than one concern (split it by concern, as pipeline/fkcheck/fkdata*.go).
const maxLines = 600

func TestNoFileOverMaxLines(t *testing.T) {
	goFiles(t, false, func(rel, path string) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(b, []byte("\n")); n > maxLines {
			t.Errorf("%s has %d lines, over %d: split it by concern", rel, n, maxLines)
		}
	})
}

// TestOperationsNamedOnlyInTheRegistry: an operation is named in package
// operation alone; everything else uses its constants or asks its
// properties (operation.Of), so a new operation is one registration and no
// string branch elsewhere misses it.
func TestOperationsNamedOnlyInTheRegistry(t *testing.T) {
	names := map[string]bool{}
	for _, o := range operation.All() {
		names[o.Name] = true
	}
	if len(names) < 3 {
		t.Fatalf("registry lists %v", names)
	}
	goFiles(t, false, func(rel, path string) {
		if strings.HasPrefix(rel, "operation/") {
			return
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if v, err := strconv.Unquote(lit.Value); err == nil && names[v] {
					t.Errorf("%s:%d: operation name %s as a string literal: use operation.%s, or ask operation.Of(p.Operation) what the operation is", rel, fset.Position(lit.Pos()).Line, lit.Value, strings.ToUpper(v[:1])+v[1:])
				}
			}
			return true
		})
	})
}

// rooms are pipeline/'s packages by concern: a file of a room's kind lives
// in its room, never directly in pipeline/, so a newcomer finds every check
// in one place and the orchestrator's package holds the orchestrator. glue
// is the prefix of the files that stay in pipeline/ because they need the
// runner (the window's tail, switch and requests need its blackout, saves
// and Run).
var rooms = []struct{ prefix, dir, glue string }{
	{"check_", "pipeline/checks/", ""},
	{"checks", "pipeline/checks/", ""},
	{"fkdata", "pipeline/fkcheck/", ""},
	{"interlock", "pipeline/interlock/", ""},
	{"window", "pipeline/window/", "window_run"},
}

func TestPipelineRooms(t *testing.T) {
	seen := map[string]int{}
	goFiles(t, true, func(rel, path string) {
		dir, name := filepath.ToSlash(filepath.Dir(rel))+"/", filepath.Base(rel)
		for _, r := range rooms {
			if dir == r.dir {
				seen[r.dir]++
			}
			glue := r.glue != "" && strings.HasPrefix(name, r.glue)
			if dir == "pipeline/" && strings.HasPrefix(name, r.prefix) && !glue {
				t.Errorf("%s belongs in its room, %s", rel, r.dir)
			}
		}
		// Each check has its own focused test beside it.
		if dir == "pipeline/checks/" && strings.HasPrefix(name, "check_") && !strings.HasSuffix(name, "_test.go") {
			if _, err := os.Stat(strings.TrimSuffix(path, ".go") + "_test.go"); err != nil {
				t.Errorf("%s has no test file of its own", rel)
			}
		}
	})
	for _, r := range rooms {
		if seen[r.dir] == 0 {
			t.Errorf("room %s is empty or gone: update docs/design.md's layout and this list", r.dir)
		}
	}
}

// maxFuncLines is the longest a non-test function may be without its
// comment saying why ("Long on purpose: ...").
const maxFuncLines = 100

func TestLongFunctionsSayWhy(t *testing.T) {
	goFiles(t, false, func(rel, path string) {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			if n > maxFuncLines && (fd.Doc == nil || !strings.Contains(fd.Doc.Text(), "Long on purpose")) {
				t.Errorf("%s: %s has %d lines: split it, or say in its comment why it is long (\"Long on purpose: ...\")", rel, fd.Name.Name, n)
			}
		}
	})
}
