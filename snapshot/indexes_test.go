package snapshot

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/chunk"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/watermark"
)

func TestDeferrableKeys(t *testing.T) {
	ddl := "CREATE TABLE `t` (\n" +
		"  `id` int(11) NOT NULL AUTO_INCREMENT,\n" +
		"  `k` int(11) NOT NULL DEFAULT 0,\n" +
		"  `c` char(120) NOT NULL DEFAULT '',\n" +
		"  PRIMARY KEY (`id`),\n" +
		"  UNIQUE KEY `u` (`c`),\n" +
		"  KEY `k_1` (`k`),\n" +
		"  KEY `kc` (`k`,`c`(10))\n" +
		") ENGINE=InnoDB AUTO_INCREMENT=5 DEFAULT CHARSET=utf8mb4"
	keys, rest := deferrable(ddl, false)
	if !reflect.DeepEqual(keys, []string{"KEY `k_1` (`k`)", "KEY `kc` (`k`,`c`(10))"}) {
		t.Fatalf("keys %q", keys)
	}
	want := "CREATE TABLE `t` (\n" +
		"  `id` int(11) NOT NULL AUTO_INCREMENT,\n" +
		"  `k` int(11) NOT NULL DEFAULT 0,\n" +
		"  `c` char(120) NOT NULL DEFAULT '',\n" +
		"  PRIMARY KEY (`id`),\n" +
		"  UNIQUE KEY `u` (`c`)\n" +
		") ENGINE=InnoDB AUTO_INCREMENT=5 DEFAULT CHARSET=utf8mb4"
	if rest != want {
		t.Fatalf("rest:\n%s", rest)
	}
	if keyName(keys[1]) != "`kc`" {
		t.Fatalf("key name %q", keyName(keys[1]))
	}
	if k, r := deferrable(ddl, true); k != nil || r != ddl {
		t.Fatal("a table a foreign key points at keeps its indexes")
	}
	for _, extra := range []string{
		"  CONSTRAINT `fk` FOREIGN KEY (`k`) REFERENCES `p` (`id`)",
		"  FULLTEXT KEY `ft` (`c`)",
		"  SPATIAL KEY `sp` (`g`)",
	} {
		d := strings.Replace(ddl, "(`k`,`c`(10))\n", "(`k`,`c`(10)),\n"+extra+"\n", 1)
		if k, r := deferrable(d, false); k != nil || r != d {
			t.Fatalf("%s: deferred %q", extra, k)
		}
	}
	// A KEY led by the AUTO_INCREMENT column stays: the column needs it.
	ai := "CREATE TABLE `t` (\n  `a` int NOT NULL,\n  `id` int NOT NULL AUTO_INCREMENT,\n  PRIMARY KEY (`a`,`id`),\n  KEY `id` (`id`),\n  KEY `x` (`a`)\n) ENGINE=InnoDB"
	keys, rest = deferrable(ai, false)
	if !reflect.DeepEqual(keys, []string{"KEY `x` (`a`)"}) || !strings.Contains(rest, "KEY `id` (`id`)\n)") {
		t.Fatalf("auto_increment: %q\n%s", keys, rest)
	}
	if k, r := deferrable("CREATE TABLE `t` (`a` int)", false); k != nil || r != "CREATE TABLE `t` (`a` int)" {
		t.Fatal("an unexpected layout defers nothing")
	}
}

// indexes lists a table's index columns, in a form comparable across servers.
func indexes(t testing.TB, f fixture, schema, table string, dst bool) []string {
	t.Helper()
	db := f.src
	if dst {
		db = f.dst
	}
	return testenv.Dump(t, db, `SELECT INDEX_NAME, SEQ_IN_INDEX, COLUMN_NAME, NON_UNIQUE, SUB_PART, INDEX_TYPE
		FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY INDEX_NAME, SEQ_IN_INDEX`, schema, table)
}

func TestIndexesBuiltAfterCopyResume(t *testing.T) {
	var rows []string
	for i := range 1200 {
		rows = append(rows, fmt.Sprintf("(%d, %d, 'c%d')", i+1, i%37, i))
	}
	f := newFixture(t,
		"CREATE TABLE p (id INT AUTO_INCREMENT PRIMARY KEY, k INT NOT NULL, c VARCHAR(20) NOT NULL, UNIQUE KEY u (c), KEY k_1 (k), KEY kc (k, c(5)))",
		"INSERT INTO p VALUES "+strings.Join(rows, ","),
		"CREATE TABLE ft (id INT PRIMARY KEY, c VARCHAR(20), KEY kc (c), FULLTEXT KEY f (c))",
		"CREATE TABLE par (id INT PRIMARY KEY, v INT, KEY v (v))",
		"CREATE TABLE ch (id INT PRIMARY KEY, p INT, KEY x (id, p), CONSTRAINT fk FOREIGN KEY (p) REFERENCES par (id))",
	)
	ctx := context.Background()
	ts := f.tables(t)
	c := f.copier()
	c.ChunkRows = 100
	if err := c.CreateTables(ctx, ts); err != nil {
		t.Fatal(err)
	}
	names := func(table string, dst bool) string {
		var out []string
		for _, r := range indexes(t, f, map[bool]string{false: f.sname, true: f.tname}[dst], table, dst) {
			out = append(out, strings.SplitN(r, " | ", 2)[0])
		}
		return strings.Join(out, ",")
	}
	if got := names("p", true); strings.Contains(got, "k_1") || strings.Contains(got, "kc") || !strings.Contains(got, "\"u\"") {
		t.Fatalf("p was created with %s: the plain keys should wait for the rows", got)
	}
	for _, tb := range []string{"ft", "par", "ch"} {
		if a, b := names(tb, false), names(tb, true); a != b {
			t.Fatalf("%s keeps its indexes: source %s, target %s", tb, a, b)
		}
	}
	// Crash once every chunk is in, before the table is done: no indexes yet.
	tb := table(t, ts, "p")
	w, err := c.CopyTable(ctx, tb, watermark.Mark{}, func(w watermark.Mark) error {
		if w.Done {
			return errCrash
		}
		return nil
	})
	if !errors.Is(err, errCrash) || w.Done {
		t.Fatalf("want the crash at done, got %+v %v", w, err)
	}
	// The crash came after the build: crash earlier, with the indexes dropped again.
	exec(t, f.dst, "ALTER TABLE `"+f.tname+"`.p DROP KEY k_1")
	w, err = c.CopyTable(ctx, tb, w, nil)
	if err != nil || !w.Done || w.Rows != 1200 {
		t.Fatalf("resume: %+v %v", w, err)
	}
	if a, b := indexes(t, f, f.sname, "p", false), indexes(t, f, f.tname, "p", true); !reflect.DeepEqual(a, b) {
		t.Fatalf("indexes after the resume:\nsource %q\ntarget %q", a, b)
	}
	sameRows(t, f, "p", "id, k, c", "id")
	// A table done already builds nothing more (and a second build is harmless).
	if err := c.buildIndexes(ctx, "p"); err != nil {
		t.Fatal(err)
	}
}

// The index build's session sorts in a 64 MiB buffer on MySQL (a larger
// setting of the server's is kept), and opens on MariaDB, which has no such
// variable.
func TestIndexSessionSortBuffer(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	conn, err := indexSession(ctx, f.dst)
	if err != nil {
		t.Fatal(err)
	}
	defer chunk.Release(conn)
	var n int64
	err = conn.QueryRowContext(ctx, "SELECT @@SESSION.innodb_ddl_buffer_size").Scan(&n)
	switch {
	case testenv.MySQL() && (err != nil || n < ddlBuffer):
		t.Fatalf("innodb_ddl_buffer_size %d (%v), want at least %d", n, err, ddlBuffer)
	case !testenv.MySQL() && dbutil.ErrNumber(err) != 1193:
		t.Fatalf("MariaDB: want unknown variable (1193), got %d, %v", n, err)
	}
	if err := conn.PingContext(ctx); err != nil {
		t.Fatalf("the session after the setting: %v", err)
	}
}
