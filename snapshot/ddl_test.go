package snapshot

import (
	"context"
	"errors"
	"testing"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/watermark"
)

// A copy with WatchDDL stops with ErrDefinitionChanged when the table's
// columns change on the source part-way (here between the second chunk's
// throttle and its read, so the read sees the new shape): the chunk read
// after the change is not written, and the saved watermark covers only
// chunks read before it. An index added meanwhile does not stop it; a
// dropped column stops it even where the read itself fails. Without
// WatchDDL an added column does not stop the copy.
func TestCopyStopsWhenTheColumnsChange(t *testing.T) {
	for _, tc := range []struct {
		name, alter string
		watch, stop bool
	}{
		{"add column", "ADD COLUMN w INT NOT NULL DEFAULT 7", true, true},
		{"modify", "MODIFY v VARCHAR(40)", true, true},
		{"drop column", "DROP COLUMN v", true, true},
		{"add index", "ADD INDEX by_v (v)", true, false},
		{"add column, not watched", "ADD COLUMN w INT NOT NULL DEFAULT 7", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t,
				"CREATE TABLE m (id INT NOT NULL PRIMARY KEY, v VARCHAR(20))",
				"INSERT INTO m SELECT seq, CONCAT('row', seq) FROM seq_1_to_500",
			)
			ctx := context.Background()
			ts := f.tables(t)
			tb := table(t, ts, "m")
			c := f.copier()
			c.ChunkRows, c.Writers, c.WatchDDL = 50, 1, tc.watch
			if err := c.CreateTables(ctx, ts); err != nil {
				t.Fatal(err)
			}
			reads := 0
			c.Throttle = func(context.Context) error {
				if reads++; reads == 3 {
					exec(t, f.src, "ALTER TABLE "+dbutil.Table(f.sname, "m")+" "+tc.alter)
				}
				return nil
			}
			var saved watermark.Mark
			w, err := c.CopyTable(ctx, tb, watermark.Mark{}, func(w watermark.Mark) error { saved = w; return nil })
			if !tc.stop {
				if err != nil || !w.Done || w.Rows != 500 {
					t.Fatalf("copy: %+v %v", w, err)
				}
				return
			}
			if !errors.Is(err, ErrDefinitionChanged) {
				t.Fatalf("want ErrDefinitionChanged, got %v", err)
			}
			if saved.Done || saved.Rows > 100 {
				t.Fatalf("saved %+v: a chunk read after the change counts", saved)
			}
			if n := count(t, f.dst, f.tname, "m"); n > 100 {
				t.Fatalf("the target has %d rows: a chunk read after the change was written", n)
			}
			// A table whose column names are no longer the planned ones is
			// refused at once; a changed type alone copies on.
			_, err = c.CopyTable(ctx, tb, saved, nil)
			if renamed := tc.name != "modify"; renamed != errors.Is(err, ErrDefinitionChanged) || !renamed && err != nil {
				t.Fatalf("copy of a changed table: %v", err)
			}
		})
	}
}
