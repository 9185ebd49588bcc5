package dbutil

import (
	"strings"
	"testing"
	"time"
)

func TestParseFlavor(t *testing.T) {
	for _, c := range []struct {
		version, comment string
		mysql            bool
		major, minor     int
		status           string
	}{
		{"10.11.19-MariaDB-0+deb12u1-log", "Debian 12", false, 10, 11, "SHOW MASTER STATUS"},
		{"9.7.4-2", "(Debian)", true, 9, 7, "SHOW BINARY LOG STATUS"},
		{"8.0.36", "MySQL Community Server - GPL", true, 8, 0, "SHOW MASTER STATUS"},
		{"5.5.5-10.6.12-MariaDB", "mariadb.org binary distribution", false, 10, 6, "SHOW MASTER STATUS"},
		{"11.8.9-MariaDB-0+deb13u1-log", "Debian 13", false, 11, 8, "SHOW MASTER STATUS"},
	} {
		f := ParseFlavor(c.version, c.comment)
		if f.MySQL != c.mysql || f.Major != c.major || f.Minor != c.minor || f.BinlogStatusSQL() != c.status {
			t.Errorf("%s: %+v, status %q", c.version, f, f.BinlogStatusSQL())
		}
	}
	my, maria := ParseFlavor("9.7.4", ""), ParseFlavor("10.11.1-MariaDB", "")
	if q, ok := my.BoundedStatement("DROP TRIGGER x", time.Second); ok || q != "DROP TRIGGER x" {
		t.Errorf("MySQL bounded statement %q %v", q, ok)
	}
	if q, ok := maria.BoundedStatement("DROP TRIGGER x", 1500*time.Millisecond); !ok || q != "SET STATEMENT max_statement_time = 1.500 FOR DROP TRIGGER x" {
		t.Errorf("MariaDB bounded statement %q %v", q, ok)
	}
	for _, ok := range [][2]Flavor{{my, my}, {my, maria}, {maria, my}, {ParseFlavor("8.4.3", ""), maria}, {ParseFlavor("10.3.1-MariaDB", ""), ParseFlavor("10.3.2-MariaDB", "")}} {
		if err := Pairable(ok[0], ok[1]); err != nil {
			t.Errorf("Pairable(%s, %s) = %v", ok[0], ok[1], err)
		}
	}
	for _, bad := range [][2]Flavor{{ParseFlavor("5.7.44", ""), maria}, {my, ParseFlavor("10.6.1-MariaDB", "")}} {
		if err := Pairable(bad[0], bad[1]); err == nil || !strings.Contains(err.Error(), "is older") {
			t.Errorf("Pairable(%s, %s) = %v, want a refusal naming the older server", bad[0], bad[1], err)
		}
	}
}

func TestNewTLSRefusesBadInput(t *testing.T) {
	for _, o := range []TLSOptions{{Mode: "on"}, {Mode: TLSVerifyCA}, {Mode: TLSRequired, Cert: "x.pem"}, {Mode: TLSVerifyIdentity, CA: "/nonexistent.pem"}} {
		if _, err := NewTLS(o); err == nil {
			t.Errorf("NewTLS(%+v) accepted", o)
		}
	}
	if o, err := NewTLS(TLSOptions{Mode: TLSOff}); err != nil || o.TLSMode() != TLSOff || o.Client("h") != nil {
		t.Errorf("off: %v", err)
	}
	if o, err := NewTLS(TLSOptions{Mode: TLSRequired}); err != nil || o.Client("h") == nil || !o.Client("h").InsecureSkipVerify {
		t.Errorf("required: %v", err)
	}
	// Credentials that name no options get the default, TLS when offered.
	var none *TLSOptions
	if none.TLSMode() != TLSPreferred || Config(Addr{Host: "h", Port: 1}, Creds{}, "").TLSConfig != "preferred" {
		t.Error("no options: not preferred")
	}
	// The options travel with the credentials: two sets in one process differ.
	off, _ := NewTLS(TLSOptions{Mode: TLSOff})
	req, _ := NewTLS(TLSOptions{Mode: TLSRequired})
	if Config(Addr{Host: "h", Port: 1}, Creds{TLS: off}, "").TLSConfig != "false" || Config(Addr{Host: "h", Port: 1}, Creds{TLS: req}, "").TLS == nil {
		t.Error("per-credential TLS options")
	}
}

// MySQL 8.4 and later have no SHOW SLAVE STATUS.
func TestReplicaStatusSQL(t *testing.T) {
	for v, want := range map[string]string{
		"9.7.4": "SHOW REPLICA STATUS", "8.4.3": "SHOW REPLICA STATUS", "8.0.36": "SHOW SLAVE STATUS",
		"10.11.19-MariaDB-0+deb12u1-log": "SHOW REPLICA STATUS", "10.4.30-MariaDB": "SHOW SLAVE STATUS",
	} {
		if got := ParseFlavor(v, "").ReplicaStatusSQL(); got != want {
			t.Errorf("%s: %s, want %s", v, got, want)
		}
	}
	cols := []string{"Slave_IO_Running", "Seconds_Behind_Master"}
	if ReplicaColumn(cols, "Seconds_Behind_Source") != 1 || ReplicaColumn(cols, "Replica_IO_Running") != 0 || ReplicaColumn(cols, "Nope") != -1 {
		t.Error("ReplicaColumn does not find the old spelling")
	}
}

// TestKnownVersions: the versions docs/servers.md lists as tested or
// expected to work pass; older and newer ones are refused naming the
// server's version and the known range.
func TestKnownVersions(t *testing.T) {
	for _, v := range []string{"10.6.21-MariaDB", "10.11.19-MariaDB-0+deb12u1-log", "11.4.5-MariaDB", "11.8.9-MariaDB-0+deb13u1-log", "8.0.36", "8.4.3", "9.7.4-2"} {
		if err := ParseFlavor(v, "").Known(); err != nil {
			t.Errorf("%s: %v", v, err)
		}
	}
	for _, c := range []struct{ v, want string }{
		{"12.0.1-MariaDB", "MariaDB 10.6 to 11.8"}, {"11.9.0-MariaDB", "MariaDB 10.6 to 11.8"}, {"10.5.27-MariaDB", "MariaDB 10.6 to 11.8"},
		{"9.8.0", "MySQL 8.0 to 9.7"}, {"10.0.0", "MySQL 8.0 to 9.7"}, {"5.7.44", "MySQL 8.0 to 9.7"},
	} {
		err := ParseFlavor(c.v, "").Known()
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.v) {
			t.Errorf("%s: %v, want a refusal naming %q and the version", c.v, err, c.want)
		}
	}
	old, new := ParseFlavor("10.11.19-MariaDB", ""), ParseFlavor("11.8.9-MariaDB", "")
	if !old.Older(new) || new.Older(old) || old.Older(old) || old.HasVector() || !new.HasVector() || !ParseFlavor("9.7.4", "").HasVector() {
		t.Error("Older or HasVector wrong between 10.11 and 11.8")
	}
}
