package checks

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/operation"
	"github.com/shardctl/shardctl/pipeline/failure"
	"github.com/shardctl/shardctl/pipeline/fkcheck"
	"github.com/shardctl/shardctl/plans"
)

// The registry runs every check and reports every refusal at once, each
// named, matching what each wraps; a check that could not run stops the rest
// with its own error.
func TestRunChecksReportsEveryProblem(t *testing.T) {
	saved := registry
	t.Cleanup(func() { registry = saved })
	ran := 0
	refuses := func(msg string, also error) func(context.Context, *CheckEnv) error {
		return func(context.Context, *CheckEnv) error {
			ran++
			if also != nil {
				return fmt.Errorf("%w: %w: %s", failure.ErrRefused, also, msg)
			}
			return fmt.Errorf("%w: %s", failure.ErrRefused, msg)
		}
	}
	registry = []Check{
		{Name: "a", Run: refuses("first problem", nil)},
		{Name: "b", Run: func(context.Context, *CheckEnv) error { ran++; return nil }},
		{Name: "c", Run: refuses("second problem", fkcheck.ErrCrossing)},
		{Name: "not for moves", Only: func(o operation.Op) bool { return o.IntoExisting }, Run: refuses("never", nil)},
	}
	err := RunChecks(context.Background(), &CheckEnv{Plan: plans.New("move", "")})
	if ran != 3 || !errors.Is(err, failure.ErrRefused) || !errors.Is(err, fkcheck.ErrCrossing) ||
		!strings.Contains(err.Error(), "check a: refused: first problem") || !strings.Contains(err.Error(), "check c: refused: rows would end") || strings.Contains(err.Error(), "never") {
		t.Fatalf("ran %d checks: %v", ran, err)
	}
	broken := errors.New("the server went away")
	registry = []Check{
		{Name: "a", Run: refuses("first problem", nil)},
		{Name: "probe", Run: func(context.Context, *CheckEnv) error { return broken }},
		{Name: "c", Run: refuses("never reached", nil)},
	}
	if err := RunChecks(context.Background(), &CheckEnv{Plan: plans.New("move", "")}); errors.Is(err, broken) || !strings.Contains(err.Error(), "first problem") || strings.Contains(err.Error(), "never reached") {
		t.Fatalf("a check that could not run after a refusal: %v", err)
	}
	registry = registry[1:]
	if err := RunChecks(context.Background(), &CheckEnv{Plan: plans.New("move", "")}); !errors.Is(err, broken) || errors.Is(err, failure.ErrRefused) {
		t.Fatalf("a check that could not run: %v", err)
	}
}

// The registry's form: checks register themselves only from check_*.go
// files, and every such file registers at least one (a check, or a family
// of checks on one subject), so a new refusal goes into the registry, where
// every run reports it with the others; and every such file has a test file
// of its own, check_*_test.go.
func TestEveryCheckIsRegisteredInItsOwnFile(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		registers := 0
		ast.Inspect(file, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok {
				if id, ok := call.Fun.(*ast.Ident); ok && id.Name == "register" {
					registers++
				}
			}
			return true
		})
		isCheck := strings.HasPrefix(f, "check_")
		switch {
		case registers > 0 && !isCheck:
			t.Errorf("%s registers a check: checks live in check_*.go files", f)
		case isCheck && registers == 0:
			t.Errorf("%s registers no check", f)
		}
		// Each check file has its own focused test of its refusal and acceptance.
		if isCheck {
			if _, err := os.Stat(strings.TrimSuffix(f, ".go") + "_test.go"); err != nil {
				t.Errorf("%s has no test file of its own (%s_test.go)", f, strings.TrimSuffix(f, ".go"))
			}
		}
	}
	if len(registry) < 12 {
		t.Fatalf("only %d checks registered", len(registry))
	}
}

func TestCheckRegistry(t *testing.T) {
	p := plans.New("merge", "")
	var names []string
	for _, c := range registry {
		if c.applies(p) {
			names = append(names, c.Name)
		}
	}
	if !strings.Contains(strings.Join(names, ","), "merge key collisions") {
		t.Fatalf("a new merge plan runs %v", names)
	}
	p.Step(plans.StepCopy).Attempts = 1
	for _, c := range registry {
		if c.applies(p) && c.Name == "merge key collisions" {
			t.Fatal("the collision scan runs after the copy started")
		}
	}
	if q := plans.New("move", ""); (Check{Only: func(o operation.Op) bool { return o.IntoExisting }}).applies(q) {
		t.Fatal("a merge check applies to a move")
	}
}
