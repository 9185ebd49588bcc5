package verify

import (
	"fmt"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/chunk"
	"github.com/shardctl/shardctl/dbutil"
)

func TestRowsChecksumSQLIsChosenForThePair(t *testing.T) {
	maria := dbutil.ParseFlavor("10.11.6-MariaDB-0+deb12u1-log", "Debian 12")
	oldMaria := dbutil.ParseFlavor("10.6.16-MariaDB", "mariadb.org binary distribution")
	mysql := dbutil.ParseFlavor("9.7.4-2", "(Debian)")
	oldMySQL := dbutil.ParseFlavor("5.7.44-log", "MySQL Community Server (GPL)")
	for _, c := range []struct {
		a, b dbutil.Flavor
		want string
	}{
		{maria, maria, "SUM(CRC32("},
		{mysql, mysql, "BIT_XOR(UNHEX(SHA2("},
		{maria, oldMaria, "CONV(SUBSTRING(SHA2("}, // both sides run the same function
		{oldMaria, oldMaria, "CONV(SUBSTRING(SHA2("},
		{oldMySQL, mysql, "CONV(SUBSTRING(SHA2("},
		{maria, mysql, "CONV(SUBSTRING(SHA2("},
	} {
		if got := RowsChecksumSQL(c.a, c.b, "s"); !strings.Contains(got, c.want) || got != RowsChecksumSQL(c.b, c.a, "s") {
			t.Errorf("%s with %s: %s, want %s…", c.a, c.b, got, c.want)
		}
	}
}

// The row text: CONCAT over the columns without NULLs, CONCAT_WS over those
// that may hold one, and their NULL marks as the bits of one number each.
func TestChecksumSQLRowText(t *testing.T) {
	mysql := dbutil.ParseFlavor("9.7.4-2", "(Debian)")
	cols := []chunk.Column{{Name: "id", Kind: chunk.Signed}, {Name: "a", Kind: chunk.Char, Null: true}, {Name: "n", Kind: chunk.Signed, Null: true}, {Name: "c", Kind: chunk.Char}}
	want := "CONCAT(`id`, '#', `c`, '#', CONCAT_WS('#', `a`, `n`), '#', ISNULL(`a`) | ISNULL(`n`) << 1)"
	if got := checksumSQL(mysql, mysql, cols); !strings.Contains(got, want) {
		t.Errorf("got %s, want it to hash %s", got, want)
	}
	var many []chunk.Column
	for i := range 70 {
		many = append(many, chunk.Column{Name: fmt.Sprintf("c%d", i), Kind: chunk.Signed, Null: true})
	}
	got := checksumSQL(mysql, mysql, many)
	if !strings.Contains(got, "ISNULL(`c62`) << 62, '#', ISNULL(`c63`) | ISNULL(`c64`) << 1") || strings.Contains(got, "<< 63") {
		t.Errorf("70 nullable columns: the marks must split into numbers of 63 bits: %s", got)
	}
}
