package snapshot

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/chunk"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/watermark"
)

func TestAppendFieldEscapesExactly(t *testing.T) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	for _, tc := range []struct {
		in   []byte
		want string
	}{
		{nil, `\N`},
		{[]byte{}, ``},
		{[]byte(`\N`), `\\N`},
		{[]byte("plain"), "plain"},
		{[]byte("a\tb\nc\\d\re\x00f"), `a\tb\nc\\d\re\0f`},
		{[]byte("\\\\\t\t\n\n"), `\\\\\t\t\n\n`},
		{[]byte("héllo 🌍 ÿ"), "héllo 🌍 ÿ"},
		{[]byte{0xff, 0xfe, 0x80, 0xc3}, "\xff\xfe\x80\xc3"}, // invalid UTF-8 stays as it is
		{[]byte("'\"`,;"), "'\"`,;"},                         // no quoting in this format
	} {
		if got := string(appendField([]byte("x"), tc.in)); got != "x"+tc.want {
			t.Errorf("appendField(%q) = %q, want %q", tc.in, got[1:], tc.want)
		}
	}
	// Every byte: only the five escaped ones change, the rest pass through.
	got := appendField(nil, all)
	if len(got) != 256+5 {
		t.Fatalf("all bytes: %d bytes out, want %d", len(got), 256+5)
	}
	var back []byte
	for i := 0; i < len(got); i++ {
		c := got[i]
		if c == '\t' || c == '\n' || c == '\r' || c == 0 {
			t.Fatalf("unescaped special byte %#x at %d", c, i)
		}
		if c == '\\' {
			i++
			c = map[byte]byte{'\\': '\\', 't': '\t', 'n': '\n', 'r': '\r', '0': 0}[got[i]]
		}
		back = append(back, c)
	}
	if string(back) != string(all) {
		t.Fatalf("all bytes do not round-trip: %q", back)
	}
}

func TestLoadableColumns(t *testing.T) {
	known := []chunk.Column{{Kind: chunk.Char}, {Kind: chunk.Binary}, {Kind: chunk.Bit}, {Kind: chunk.Enum}, {Kind: chunk.Temporal}}
	if !loadable(known, false) {
		t.Fatal("known kinds should be loadable on MariaDB")
	}
	if loadable(known, true) {
		t.Fatal("binary and BIT columns must go through INSERT on MySQL (error 1300)")
	}
	if !loadable([]chunk.Column{{Kind: chunk.Char}, {Kind: chunk.Signed}, {Kind: chunk.Temporal}}, true) {
		t.Fatal("text, numbers and dates are loadable on MySQL")
	}
	if loadable([]chunk.Column{{Kind: chunk.Signed}, {Kind: chunk.Other}}, false) {
		t.Fatal("GEOMETRY-like columns must go through INSERT")
	}
}

// setLocalInfile switches the server's local_infile for the test.
func setLocalInfile(t testing.TB, db *sql.DB, on int) {
	t.Helper()
	var was int
	if err := db.QueryRow("SELECT @@GLOBAL.local_infile").Scan(&was); err != nil {
		t.Fatal(err)
	}
	exec(t, db, fmt.Sprintf("SET GLOBAL local_infile = %d", on))
	t.Cleanup(func() { _, _ = db.Exec(fmt.Sprintf("SET GLOBAL local_infile = %d", was)) })
}

// comLoad is the target server's count of LOAD DATA statements so far.
func comLoad(t testing.TB, db *sql.DB) int64 {
	t.Helper()
	var name string
	var n int64
	if err := db.QueryRow("SHOW GLOBAL STATUS LIKE 'Com_load'").Scan(&name, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

func checksum(t testing.TB, db *sql.DB, schema, table string) int64 {
	t.Helper()
	var name string
	var sum sql.NullInt64
	if err := db.QueryRow("CHECKSUM TABLE "+dbutil.Table(schema, table)+" EXTENDED").Scan(&name, &sum); err != nil {
		t.Fatal(err)
	}
	return sum.Int64
}

// awkwardDDL has a column of every type the seed and common schemas use,
// generated columns (left out of the load), and values full of the bytes
// LOAD DATA's format gives meaning to.
const awkwardDDL = "CREATE TABLE awk (id INT NOT NULL, k VARBINARY(16) NOT NULL, " +
	"ti TINYINT, si SMALLINT UNSIGNED, mi MEDIUMINT, bi BIGINT UNSIGNED, yr YEAR, " +
	"c CHAR(5), vc VARCHAR(40), l1 VARCHAR(20) CHARACTER SET latin1, tx MEDIUMTEXT, js JSON, " +
	"bn BINARY(4), vb VARBINARY(300), bl LONGBLOB, " +
	"d DATE, tm TIME(3), dt DATETIME(6), ts TIMESTAMP(6) NULL, " +
	"de DECIMAL(20,6), f FLOAT, db DOUBLE, bt BIT(17), en ENUM('a','b\\\\t','c'), st SET('x','y','z'), " +
	"g1 INT AS (ti + 1) VIRTUAL, g2 INT AS (LENGTH(vc) + 1) STORED, " +
	"PRIMARY KEY (id, k), KEY by_vc (vc)) DEFAULT CHARSET=utf8mb4"

const awkwardCols = "id, k, ti, si, mi, bi, yr, c, vc, l1, tx, js, bn, vb, bl, d, tm, dt, ts, de, f, db, bt, en, st"

const awkwardList = "id, HEX(k), ti, si, mi, bi, yr, HEX(c), HEX(vc), HEX(l1), HEX(tx), js, HEX(bn), HEX(vb), SHA2(bl, 256), " +
	"d, tm, dt, ts, de, CAST(f AS DOUBLE), db, bt+0, en, st, g1, g2"

func awkwardRows(n int) []string {
	vals := []string{
		"(%d, 0x00, -128, 65535, -8388608, 18446744073709551615, 1901, 'a\\tb', 'tab\\there\\nnl\\\\bs\\rcr', 'été', 'x\\0y\\\\N', '{\"a\": \"b\\\\tc\", \"n\": [1, null]}', " +
			"0x00090a5c, 0x00010203090a0d5c4e7f80ff, REPEAT(0x005c090a0dff, 5000), '1000-01-01', '-838:59:59.000', '1000-01-01 00:00:00.000001', '1970-01-01 00:00:01', " +
			"-99999999999999.999999, 3.4028234e38, -2.2250738585072014e-308, b'11111111111111111', 'b\\\\t', 'x,z')",
		"(%d, '', 127, 0, 8388607, 0, 2155, '', '', '', '', 'null', 0x5c4e0000, '', '', '2000-02-29', '00:00:00', '2000-02-29 00:00:00', NULL, 0, 0, 0, b'0', 'a', '')",
		"(%d, 0xff5c, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
		"(%d, '\\\\N', 0, 1, 2, 3, 2000, '🌍', 'héllo 🌍 \\\\N', 'ÿ\\\\', 'line1\\nline2\\n', '[\"\\\\\\\\\"]', 'ab', 0x5c, 0x0a, '9999-12-31', '838:59:59.000', '9999-12-31 23:59:59.999999', '2038-01-19 03:14:07.999999', 0.000001, 1.17549435e-38, 1e300, b'1', 'c', 'x,y,z')",
		// YEAR 0000: the driver reads its text as the number 0, and '0' as text is 2000.
		"(%d, 0x01, 1, 2, 3, 4, 0, 'y', 'year', 'y', 'y', '{}', 'ab', 0x01, 0x01, '2000-01-01', '00:00:01', '2000-01-01 00:00:01', NULL, 1, 1, 1, b'1', 'a', 'x')",
	}
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf(vals[i%len(vals)], i))
	}
	return out
}

func TestLoadDataCopiesAwkwardTypesExactly(t *testing.T) {
	f := newFixture(t, awkwardDDL, "INSERT INTO awk ("+awkwardCols+") VALUES "+strings.Join(awkwardRows(200), ","))
	ctx := context.Background()
	ts := f.tables(t)
	tb := table(t, ts, "awk")
	c := f.copier()
	c.ChunkRows = 37
	setLocalInfile(t, f.dst, 1) // off by default on MySQL 8+
	if err := c.CreateTables(ctx, ts); err != nil {
		t.Fatal(err)
	}
	loads := comLoad(t, f.dst)
	w, err := c.CopyTable(ctx, tb, watermark.Mark{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !w.Done || w.Rows != 200 {
		t.Fatalf("watermark %+v, want 200 rows done", w)
	}
	// On MySQL a table with binary or BIT columns goes through INSERT (see
	// loadable); the rows must come out the same either way.
	if used := comLoad(t, f.dst) != loads; used == testenv.MySQL() {
		t.Fatalf("LOAD DATA used: %v, on %s", used, testenv.Flavor())
	}
	sameRows(t, f, "awk", awkwardList, "id, k")
	if a, b := checksum(t, f.src, f.sname, "awk"), checksum(t, f.dst, f.tname, "awk"); a != b {
		t.Fatalf("CHECKSUM TABLE: source %d, target %d", a, b)
	}

	// Resume over rows already there: a stale copy of some rows, others
	// missing; the short LOAD count sends those chunks through REPLACE.
	exec(t, f.dst, "UPDATE "+dbutil.Table(f.tname, "awk")+" SET vc = 'stale', bl = NULL WHERE id % 3 = 0")
	exec(t, f.dst, "DELETE FROM "+dbutil.Table(f.tname, "awk")+" WHERE id % 5 = 0 AND id > 20")
	c.ChunkRows = 50
	w, err = c.CopyTable(ctx, tb, watermark.Mark{After: []string{"20", "0x00"}, Rows: 21}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !w.Done || w.Rows != 200 {
		t.Fatalf("resumed watermark %+v, want 200 rows done", w)
	}
	got := dump(t, f.dst, f.tname, "awk", awkwardList, "id, k")
	want := dump(t, f.src, f.sname, "awk", awkwardList, "id, k")
	// Rows up to the watermark were not copied again: the stale ones stay.
	for i := range want {
		if i > 20 && got[i] != want[i] {
			t.Fatalf("row %d after the resume:\n%s\nwant\n%s", i, got[i], want[i])
		}
	}
}

func TestCopyFallsBackToInsertWithoutLocalInfile(t *testing.T) {
	f := newFixture(t, awkwardDDL, "INSERT INTO awk ("+awkwardCols+") VALUES "+strings.Join(awkwardRows(40), ","),
		"CREATE TABLE geo (id INT PRIMARY KEY, p POINT)",
		"INSERT INTO geo VALUES (1, POINT(1, 2)), (2, NULL)")
	setLocalInfile(t, f.dst, 0)
	ctx := context.Background()
	ts := f.tables(t)
	c := f.copier()
	c.ChunkRows = 7
	if err := c.CreateTables(ctx, ts); err != nil {
		t.Fatal(err)
	}
	loads := comLoad(t, f.dst)
	if err := c.CopyAll(ctx, ts, nil, 2, nil); err != nil {
		t.Fatal(err)
	}
	if comLoad(t, f.dst) != loads {
		t.Fatal("LOAD DATA was tried although the target refuses it")
	}
	sameRows(t, f, "awk", awkwardList, "id, k")
	sameRows(t, f, "geo", "id, HEX(p)", "id")
	// The server's refusal is recognised, whichever flavor says it.
	_, err := f.dst.Exec("LOAD DATA LOCAL INFILE 'Reader::none' INTO TABLE " + dbutil.Table(f.tname, "geo"))
	if err == nil || !refusedLocal(err) {
		t.Fatalf("LOAD DATA LOCAL with local_infile=0: %v (error %d), want a refusal", err, dbutil.ErrNumber(err))
	}
}

// TestLoadDataCharsets copies text through both of LOAD DATA's character
// sets: "binary" when every text column is utf8mb4 (the bytes go in as they
// are), utf8mb4 when a column needs converting (latin1) or the type refuses
// binary strings (MySQL's JSON). Either way the rows must come out exact.
func TestLoadDataCharsets(t *testing.T) {
	// MariaDB's UUID, INET6 and INET4 take a binary string as their binary
	// form: their text must go in as utf8mb4.
	var typed []string
	if !testenv.MySQL() {
		typed = []string{"CREATE TABLE typed (id INT NOT NULL PRIMARY KEY, u UUID, a6 INET6, a4 INET4, vc VARCHAR(10)) DEFAULT CHARSET=utf8mb4",
			"INSERT INTO typed VALUES (1, '6ccd780c-baba-1026-9564-5b8c656024db', '2001:db8::1', '10.0.0.1', 'x'), (2, NULL, '::ffff:1.2.3.4', NULL, NULL)"}
	}
	f := newFixture(t, append([]string{
		"CREATE TABLE allmb4 (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, c CHAR(2), vc VARCHAR(3), tx TEXT, n INT) DEFAULT CHARSET=utf8mb4",
		"INSERT INTO allmb4 (c, vc, tx, n) VALUES ('🌍🌍', 'é🌍\\t', 'line1\\nline2\\0 \\\\N', 1), ('', '', '', NULL), (NULL, NULL, NULL, 3), ('ÿ ', '🌍🌍🌍', 'ça', 4)",
		"CREATE TABLE enums (id INT NOT NULL PRIMARY KEY, en ENUM('a','é','€'), st SET('x','ÿ','€')) DEFAULT CHARSET=utf8mb4",
		"INSERT INTO enums VALUES (1, 'é', 'x,ÿ'), (2, '€', '€'), (3, NULL, '')",
		"CREATE TABLE mixed (id INT NOT NULL PRIMARY KEY, l1 VARCHAR(20) CHARACTER SET latin1, vc VARCHAR(40)) DEFAULT CHARSET=utf8mb4",
		"INSERT INTO mixed VALUES (1, 'été ÿ', 'ça 🌍'), (2, '', NULL)",
		"CREATE TABLE withjson (id INT NOT NULL PRIMARY KEY, js JSON, vc VARCHAR(40)) DEFAULT CHARSET=utf8mb4",
		`INSERT INTO withjson VALUES (1, '{"a": "é\\t🌍", "n": [1, null]}', 'x'), (2, NULL, 'y')`}, typed...)...)
	ctx := context.Background()
	setLocalInfile(t, f.dst, 1)
	ts := f.tables(t)
	c := f.copier()
	if err := c.CreateTables(ctx, ts); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"allmb4": "binary", "enums": "utf8mb4", "mixed": "utf8mb4", "withjson": "binary"}
	if testenv.MySQL() {
		want["withjson"] = "utf8mb4"
	} else {
		want["typed"] = "utf8mb4"
	}
	for name, cs := range want {
		got, err := loadCharset(ctx, f.dst, f.tname, name)
		if err != nil || got != cs {
			t.Fatalf("%s: LOAD DATA character set %q (%v), want %q", name, got, err, cs)
		}
		loads := comLoad(t, f.dst)
		if w, err := c.CopyTable(ctx, table(t, ts, name), watermark.Mark{}, nil); err != nil || !w.Done {
			t.Fatalf("%s: %+v %v", name, w, err)
		}
		if comLoad(t, f.dst) == loads {
			t.Fatalf("%s: copied without LOAD DATA", name)
		}
	}
	sameRows(t, f, "allmb4", "id, HEX(c), HEX(vc), HEX(tx), n", "id")
	sameRows(t, f, "enums", "id, HEX(en), HEX(st)", "id")
	if !testenv.MySQL() {
		sameRows(t, f, "typed", "id, u, a6, a4, vc", "id")
	}
	sameRows(t, f, "mixed", "id, HEX(l1), HEX(vc)", "id")
	sameRows(t, f, "withjson", "id, js, HEX(vc)", "id")
}

// BenchmarkAppendField encodes a sysbench row's values (digits and dashes,
// nothing to escape), the common case of the copy's reader.
func BenchmarkAppendField(b *testing.B) {
	vals := [][]byte{[]byte("123456"), []byte("498213"),
		[]byte(strings.Repeat("83868641912-", 10)[:119]), []byte(strings.Repeat("67847967377-", 5)[:59])}
	var buf []byte
	b.SetBytes(int64(6 + 6 + 119 + 59))
	for b.Loop() {
		buf = buf[:0]
		for _, v := range vals {
			buf = appendField(buf, v)
		}
	}
}
