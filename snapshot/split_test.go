package snapshot

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/chunk"
	"github.com/shardctl/shardctl/tables"
	"github.com/shardctl/shardctl/watermark"
)

func TestTrackerPrefixRunsThroughRangesInOrder(t *testing.T) {
	var saves []watermark.Mark
	tr := newTracker(watermark.Mark{}, "t", func(w watermark.Mark) error { saves = append(saves, w); return nil }, nil)
	tr.parts = 3
	commit := func(part, seq int, last string) {
		t.Helper()
		if err := tr.committed(batch{part: part, seq: seq, rows: 10, last: []string{last}}); err != nil {
			t.Fatal(err)
		}
	}
	commit(1, 0, "60")
	commit(2, 0, "110")
	commit(0, 0, "10")
	commit(0, 1, "20")
	// Range 0 may still have chunks to come: nothing past it counts yet.
	if got := saves[len(saves)-1]; !reflect.DeepEqual(got, watermark.Mark{After: []string{"20"}, Rows: 20}) {
		t.Fatalf("saved %+v", got)
	}
	if err := tr.ended(0, 2); err != nil {
		t.Fatal(err)
	}
	if got := saves[len(saves)-1]; !reflect.DeepEqual(got, watermark.Mark{After: []string{"60"}, Rows: 30}) {
		t.Fatalf("after range 0 ended: saved %+v", got)
	}
	if err := tr.ended(1, 1); err != nil {
		t.Fatal(err)
	}
	if got := saves[len(saves)-1]; !reflect.DeepEqual(got, watermark.Mark{After: []string{"110"}, Rows: 40}) {
		t.Fatalf("after range 1 ended: saved %+v", got)
	}
}

func TestCopyWithSeveralReadersResumes(t *testing.T) {
	var rows []string
	for i := range 3000 {
		rows = append(rows, fmt.Sprintf("(%d, %d, 'row%d')", i/7, i%7, i))
	}
	f := newFixture(t,
		"CREATE TABLE m (a INT NOT NULL, b INT NOT NULL, v VARCHAR(20), PRIMARY KEY (a, b))",
		"INSERT INTO m VALUES "+strings.Join(rows, ","),
	)
	ctx := context.Background()
	ts := f.tables(t)
	tb := table(t, ts, "m")
	tb.EstRows = 3000
	c := f.copier()
	c.ChunkRows, c.Writers, c.Readers, c.SplitRows = 50, 3, 3, 100
	if err := c.CreateTables(ctx, ts); err != nil {
		t.Fatal(err)
	}
	var bounds int
	if b, err := c.split(ctx, f.src, tb, mustKey(t, f, tb), "1=1", nil, watermark.Mark{}); err != nil || len(b) != 2 {
		t.Fatalf("split: %q %v, want 2 bounds", b, err)
	} else {
		bounds = len(b)
	}
	// The crash comes at the first save past 350 rows (7 chunks), not at a
	// count of saves: the watermark saves only when its prefix advances, and
	// on a busy machine a late first chunk makes it advance in a few large
	// steps (the copy then ended before an 8th save: "want the crash").
	var saved watermark.Mark
	_, err := c.CopyTable(ctx, tb, watermark.Mark{}, func(w watermark.Mark) error {
		if w.Rows >= 350 && !w.Done {
			return errCrash
		}
		saved = w
		return nil
	})
	if !errors.Is(err, errCrash) {
		t.Fatalf("want the crash, got %v", err)
	}
	// Every row up to the watermark is there (when one was saved before the
	// crash: a first save past 350 rows leaves none, and the resume starts over).
	var missing int
	if saved.After == nil {
		t.Logf("no watermark saved before the crash")
	} else if err := f.dst.QueryRow("SELECT ? - COUNT(*) FROM `"+f.tname+"`.m WHERE (a, b) <= (?, ?)", saved.Rows, saved.After[0], saved.After[1]).Scan(&missing); err != nil || missing != 0 {
		t.Fatalf("watermark %+v: %d rows missing below it (%v)", saved, missing, err)
	}
	w, err := c.CopyTable(ctx, tb, saved, nil)
	if err != nil || !w.Done || w.Rows != 3000 {
		t.Fatalf("resumed: %+v %v", w, err)
	}
	sameRows(t, f, "m", "a, b, v", "a, b")
	t.Logf("%d ranges; crashed at %+v", bounds+1, saved)
}

func mustKey(t testing.TB, f fixture, tb tables.Table) chunk.Key {
	t.Helper()
	k, err := chunk.LoadKey(context.Background(), f.src, f.sname, tb.Name, tb.Index(), tb.PK)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
