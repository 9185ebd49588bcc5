package binlog

import "testing"

// TestGTIDContainsPerFlavor: MariaDB containment is per domain *and* server
// (the 0-3-482 against a checkpoint of 0-2-141 is not contained);
// MySQL is interval containment per source UUID.
func TestGTIDContainsPerFlavor(t *testing.T) {
	const u1, u2 = "3e11fa47-71ca-11e1-9e33-c80aa9429562", "4f22ab58-82db-22f2-af44-d91bb0530673"
	cases := []struct {
		flavor, have, want string
		ok                 bool
	}{
		{"mariadb", "0-3-482", "0-2-141", false},             // another server's later transaction
		{"mariadb", "0-2-141,0-3-482", "0-2-141", true},      // the replica wrote the source's GTID, then its own
		{"mariadb", "0-2-140,0-3-482", "0-2-141", false},     // one transaction short
		{"mariadb", "0-2-500", "0-2-141", true},              // later on the same server
		{"mariadb", "0-2-141", "0-2-141,1-2-7", false},       // a whole domain missing
		{"mariadb", "1-2-9, 0-2-141", "0-2-141,1-2-7", true}, // order and spaces do not matter
		{"mariadb", "0-2-141", "", true},                     // an empty checkpoint asks for nothing
		{"mysql", u1 + ":1-100", u1 + ":1-90", true},         // contained
		{"mysql", u1 + ":1-100", u1 + ":1-101", false},       // one short
		{"mysql", u2 + ":1-1000", u1 + ":1-90", false},       // another server's transactions
		{"mysql", u1 + ":1-50:52-100", u1 + ":1-100", false}, // a gap
		{"mysql", u1 + ":1-100," + u2 + ":1-5", u1 + ":20-30", true},
	}
	for _, c := range cases {
		ok, err := GTIDContains(c.flavor, c.have, c.want)
		if err != nil {
			t.Fatalf("%s: %q contains %q: %v", c.flavor, c.have, c.want, err)
		}
		if ok != c.ok {
			t.Errorf("%s: %q contains %q = %v, want %v", c.flavor, c.have, c.want, ok, c.ok)
		}
	}
	if _, err := GTIDContains("mariadb", "0-2", "0-2-1"); err == nil {
		t.Error("a malformed MariaDB GTID was accepted")
	}
}
