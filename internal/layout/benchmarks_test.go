package layout

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Limits of docs/BENCHMARKS.md's table, which engineers scan and add rows to:
// the table opens the page, one figure a cell.
const (
	benchTableByLine = 30
	benchMaxCell     = 300
)

var benchDate = regexp.MustCompile(`\b20\d\d-\d\d-\d\d\b`)

// TestBenchmarksTableFirst keeps docs/BENCHMARKS.md scannable: its table's
// header by line 30, no cell over 300 characters, every row with a date and
// a command (the history, with the long figures, is BENCHMARKS-history.md).
func TestBenchmarksTableFirst(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "BENCHMARKS.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	header := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "|") {
			header = i
			break
		}
	}
	if header < 0 || header+1 > benchTableByLine {
		t.Fatalf("docs/BENCHMARKS.md: the table's header is at line %d, want it by line %d (move prose below the table)", header+1, benchTableByLine)
	}
	cols := benchCells(lines[header])
	dateCol, cmdCol := -1, -1
	for i, c := range cols {
		switch {
		case strings.HasPrefix(c, "date"):
			dateCol = i
		case c == "command":
			cmdCol = i
		}
	}
	if dateCol < 0 || cmdCol < 0 {
		t.Fatalf("docs/BENCHMARKS.md: the table's header %q has no date or no command column", lines[header])
	}
	rows := 0
	for i := header + 2; i < len(lines) && strings.HasPrefix(lines[i], "|"); i++ {
		rows++
		cells := benchCells(lines[i])
		if len(cells) != len(cols) {
			t.Errorf("docs/BENCHMARKS.md:%d has %d cells, the header %d (escape a | inside a cell as \\|)", i+1, len(cells), len(cols))
			continue
		}
		for j, c := range cells {
			if n := len([]rune(c)); n > benchMaxCell {
				t.Errorf("docs/BENCHMARKS.md:%d: the %q cell has %d characters, over %d: one figure a cell, the rest to BENCHMARKS-history.md", i+1, cols[j], n, benchMaxCell)
			}
		}
		if !benchDate.MatchString(cells[dateCol]) {
			t.Errorf("docs/BENCHMARKS.md:%d: no date (YYYY-MM-DD) in the date cell %q", i+1, cells[dateCol])
		}
		if !strings.Contains(cells[cmdCol], "`") {
			t.Errorf("docs/BENCHMARKS.md:%d: no command (in backquotes) in the command cell %q", i+1, cells[cmdCol])
		}
	}
	if rows == 0 {
		t.Error("docs/BENCHMARKS.md: the table has no rows")
	}
}

// benchCells splits a Markdown table row into its trimmed cells; \| inside
// a cell (a pipe in a command) does not split it.
func benchCells(row string) []string {
	row = strings.TrimSpace(row)
	row = strings.TrimSuffix(strings.TrimPrefix(row, "|"), "|")
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(row); i++ {
		if row[i] == '\\' && i+1 < len(row) && row[i+1] == '|' {
			cur.WriteString(`\|`)
			i++
			continue
		}
		if row[i] == '|' {
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
			continue
		}
		cur.WriteByte(row[i])
	}
	return append(cells, strings.TrimSpace(cur.String()))
}
