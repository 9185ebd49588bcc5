// Package layout checks the house rules of the source tree: only cmd/ (and
// main.go) know the command-line libraries, and plans/ links no database.
package layout

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var cliOnly = []string{"github.com/spf13/cobra", "github.com/spf13/viper", "github.com/schollz/progressbar"}

func TestOnlyCmdKnowsTheCommandLine(t *testing.T) {
	root := filepath.Join("..", "..")
	checked := 0
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
		if !strings.HasSuffix(path, ".go") || rel == "main.go" || strings.HasPrefix(rel, "cmd"+string(filepath.Separator)) {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		checked++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			for _, banned := range cliOnly {
				if p == banned || strings.HasPrefix(p, banned+"/") {
					t.Errorf("%s imports %s: only cmd/ may (domain packages report through small interfaces that cmd renders)", rel, p)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked only %d files: is the walk rooted at the repository?", checked)
	}
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
