package verify

import (
	"strings"
	"testing"

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
