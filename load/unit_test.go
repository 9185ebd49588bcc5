package load

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
)

func TestParseGroup(t *testing.T) {
	good := map[string]Group{
		"moving=1-1001":                     {"moving", 1, 1001},
		"1-1001":                            {"1-1001", 1, 1001},
		" staying = 1_000_000 - 1_000_500 ": {"staying", 1_000_000, 1_000_500},
		"-10-5":                             {"-10-5", -10, 5},
		"neg=-10--5":                        {"neg", -10, -5},
		"edge=-2147483648-2147483648":       {"edge", -2147483648, 2147483648},
		"other-shard=2000000-2000100":       {"other-shard", 2_000_000, 2_000_100},
	}
	for in, want := range good {
		got, err := ParseGroup(in)
		if err != nil || got != want {
			t.Errorf("ParseGroup(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	bad := map[string]string{
		"":                         "empty",
		"x=":                       "not two integers",
		"=1-2":                     "empty name",
		"a b=1-2":                  "spaces",
		"a,b=1-2":                  "','",
		"x=5-5":                    "LO must be below HI",
		"x=6-5":                    "LO must be below HI",
		"x=1-":                     "not two integers",
		"x=a-b":                    "not two integers",
		"1-2-3":                    "not two integers",
		"x=0-3000000000":           "INT",
		"x=1-99999999999999999999": "out of range",
	}
	for in, why := range bad {
		_, err := ParseGroup(in)
		if err == nil || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), "NAME=LO-HI") {
			t.Errorf("ParseGroup(%q) error = %v; want one saying %q and showing the syntax", in, err, why)
		}
	}
	gs, err := ParseGroups("moving=1-1001,staying=1000001-1001001")
	if err != nil || len(gs) != 2 || gs[1].Name != "staying" {
		t.Fatalf("ParseGroups: %+v, %v", gs, err)
	}
}

func TestConfigRejectsOverlapsAndDuplicates(t *testing.T) {
	for _, gs := range [][]Group{
		{{"a", 1, 100}, {"b", 50, 200}},
		{{"a", 1, 100}, {"a", 100, 200}},
		{},
	} {
		if _, err := (Config{Router: nil, Groups: gs}).withDefaults(); err == nil {
			t.Errorf("groups %v accepted", gs)
		}
	}
}

func TestParseMix(t *testing.T) {
	if m, err := ParseMix("40/45/15"); err != nil || m != DefaultMix {
		t.Fatalf("ParseMix: %v, %v", m, err)
	}
	if m, err := ParseMix(" 100 / 0 / 0 "); err != nil || m != (Mix{100, 0, 0}) {
		t.Fatalf("ParseMix: %v, %v", m, err)
	}
	for _, s := range []string{"", "1/2", "a/b/c", "0/0/0", "-1/5/5", "1/2/3/4"} {
		if _, err := ParseMix(s); err == nil {
			t.Errorf("ParseMix(%q) accepted", s)
		}
	}
}

func put(seq, key int64, val string) Entry { return Entry{Seq: seq, Key: key, Op: OpPut, Val: val} }
func del(seq, key int64) Entry             { return Entry{Seq: seq, Key: key, Op: OpDel} }
func amb(e Entry) Entry                    { e.Ambiguous = true; return e }

func TestFold(t *testing.T) {
	a, b, c := Outcome{true, "a"}, Outcome{true, "b"}, Outcome{true, "c"}
	absent, other := Outcome{}, Outcome{true, "seeded"}
	cases := []struct {
		name    string
		entries []Entry
		allow   []Outcome
		deny    []Outcome
	}{
		{"put", []Entry{put(1, 7, "a")}, []Outcome{a}, []Outcome{absent, b}},
		{"put put", []Entry{put(1, 7, "a"), put(2, 7, "b")}, []Outcome{b}, []Outcome{a, absent}},
		{"put del", []Entry{put(1, 7, "a"), del(2, 7)}, []Outcome{absent}, []Outcome{a}},
		{"del put", []Entry{del(1, 7), put(2, 7, "a")}, []Outcome{a}, []Outcome{absent}},
		{"out of order lines", []Entry{put(2, 7, "b"), put(1, 7, "a")}, []Outcome{b}, []Outcome{a}},
		{"put ambiguous-del", []Entry{put(1, 7, "a"), amb(del(2, 7))}, []Outcome{a, absent}, []Outcome{b, other}},
		{"put ambiguous-put", []Entry{put(1, 7, "a"), amb(put(2, 7, "b"))}, []Outcome{a, b}, []Outcome{absent}},
		{"two ambiguities", []Entry{put(1, 7, "a"), amb(put(2, 7, "b")), amb(put(3, 7, "c"))}, []Outcome{a, b, c}, []Outcome{absent}},
		{"ambiguity settled", []Entry{put(1, 7, "a"), amb(del(2, 7)), put(3, 7, "c")}, []Outcome{c}, []Outcome{a, absent}},
		{"ambiguous first", []Entry{amb(put(1, 7, "a"))}, []Outcome{a, absent, other}, nil},
		{"ambiguous first then put", []Entry{amb(put(1, 7, "a")), put(2, 7, "b")}, []Outcome{b}, []Outcome{a, other}},
	}
	for _, tc := range cases {
		x := Fold(append(tc.entries, put(1, 8, "other key")))[7]
		for _, o := range tc.allow {
			if !x.Allows(o) {
				t.Errorf("%s: %v does not allow %v", tc.name, x, o)
			}
		}
		for _, o := range tc.deny {
			if x.Allows(o) {
				t.Errorf("%s: %v allows %v", tc.name, x, o)
			}
		}
	}
	if s := Fold([]Entry{put(1, 7, "a"), amb(del(2, 7))})[7].String(); s != `"a" or absent` {
		t.Errorf("String = %s", s)
	}
}

func TestParseLedgerToleratesOnlyACutOffLastLine(t *testing.T) {
	full := `{"seq":1,"key":5,"op":"put","val":"x","t":1}` + "\n" + `{"seq":2,"key":5,"op":"del","t":2,"ambiguous":true}` + "\n"
	es, err := parseLedger(strings.NewReader(full), "l")
	if err != nil || len(es) != 2 || !es[1].Ambiguous || es[0].Val != "x" {
		t.Fatalf("%+v, %v", es, err)
	}
	es, err = parseLedger(strings.NewReader(full+`{"seq":3,"ke`), "l")
	if !errors.Is(err, ErrTruncated) || len(es) != 2 {
		t.Fatalf("cut-off line: %+v, %v", es, err)
	}
	if _, err = parseLedger(strings.NewReader(`{"seq":3,"ke`+"\n"+full), "l"); err == nil || errors.Is(err, ErrTruncated) {
		t.Fatalf("bad middle line accepted: %v", err)
	}
	if _, err = parseLedger(strings.NewReader(`{"seq":3,"key":1,"op":"upsert"}`+"\n"), "l"); err == nil {
		t.Fatal("unknown op accepted")
	}
}

func TestOwnedKeysPartitionTheGroup(t *testing.T) {
	for _, g := range []Group{{"a", 0, 100}, {"b", -17, 23}, {"c", 5, 8}, {"d", 1_000_001, 1_000_002}} {
		for _, n := range []int{1, 3, 8} {
			seen := map[int64]int{}
			for w := 0; w < n; w++ {
				o := ownedKeys(g, w, n)
				for i := int64(0); i < o.count; i++ {
					k := o.first + i*o.step
					if !g.Contains(k) || ((k%int64(n))+int64(n))%int64(n) != int64(w) {
						t.Fatalf("%v/%d: worker %d owns %d", g, n, w, k)
					}
					seen[k]++
				}
			}
			if int64(len(seen)) != g.Hi-g.Lo {
				t.Fatalf("%v/%d: %d keys owned, want %d", g, n, len(seen), g.Hi-g.Lo)
			}
			for k, c := range seen {
				if c != 1 {
					t.Fatalf("%v/%d: key %d owned %d times", g, n, k, c)
				}
			}
		}
	}
}

func TestUncertain(t *testing.T) {
	cases := map[error]bool{
		&mysql.MySQLError{Number: 1290}:                      false, // fenced: refused
		fmt.Errorf("x: %w", &mysql.MySQLError{Number: 1146}): false,
		&mysql.MySQLError{Number: 2013}:                      true,
		driver.ErrBadConn:                                    true,
		mysql.ErrInvalidConn:                                 true,
		errors.New("read tcp: connection reset"):             true,
	}
	for err, want := range cases {
		if uncertain(err) != want {
			t.Errorf("uncertain(%v) = %v", err, !want)
		}
	}
}

func TestRowValuesFitTheSchema(t *testing.T) {
	v := rowValues(-3, "a-very-long-group-name-indeed", "0abc.zzzzzzzzzzz")
	if len([]rune(v[2].(string))) > 14 || len(v[3].(string)) > 16 || (v[4] != "M" && v[4] != "F") {
		t.Fatalf("%v", v)
	}
}
