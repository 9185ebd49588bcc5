package sqltok

import (
	"slices"
	"testing"
)

func idents(q string) []Ident {
	var out []Ident
	for id := range Idents(q) {
		out = append(out, id)
	}
	return out
}

func TestIdents(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []Ident
	}{
		// backquotes, with a doubled backquote inside
		{"`a``b`.c", []Ident{{Text: "a`b", Start: 0, End: 6, Quoted: true}, {Text: "c", Start: 7, End: 8}}},
		// qualified names, bare and quoted
		{"s.t `s`.`t`", []Ident{{"s", 0, 1, false}, {"t", 2, 3, false}, {"s", 4, 7, true}, {"t", 8, 11, true}}},
		// strings, with a backslash escape and a doubled quote, are not names
		{`'it\'s s.t' , 'a''b' x`, []Ident{{"x", 21, 22, false}}},
		// double quotes are names (ANSI_QUOTES), a backslash escapes in them
		{`"s".t "a\"b"`, []Ident{{"s", 0, 3, true}, {"t", 4, 5, false}, {`a\"b`, 6, 12, true}}},
		{`"a""b"`, []Ident{{`a"b`, 0, 6, true}}},
		// comments of every kind are skipped; "--" needs whitespace after it
		{"a -- s.t\nb # s.t\nc /* s.t */ d", []Ident{{"a", 0, 1, false}, {"b", 9, 10, false}, {"c", 17, 18, false}, {"d", 29, 30, false}}},
		{"a--b", []Ident{{"a", 0, 1, false}, {"b", 3, 4, false}}},
		// an executable comment is code
		{"/*!40101 SET x */", []Ident{{"SET", 9, 12, false}, {"x", 13, 14, false}}},
		{"/*M!100100 y */", []Ident{{"y", 11, 12, false}}},
		// unterminated: to the end
		{"`ab", []Ident{{"ab", 0, 3, true}}},
		{"x 'ab", []Ident{{"x", 0, 1, false}}},
		{"x /* ab", []Ident{{"x", 0, 1, false}}},
		// identifiers may hold $, digits and UTF-8
		{"$a1 ñame", []Ident{{"$a1", 0, 3, false}, {"ñame", 4, 9, false}}},
	} {
		if got := idents(c.in); !slices.Equal(got, c.want) {
			t.Errorf("Idents(%q)\n got %+v\nwant %+v", c.in, got, c.want)
		}
	}
}

func TestFirstWord(t *testing.T) {
	for in, want := range map[string]string{
		"  alter table t":                        "ALTER",
		"/* c */ -- x\n# y\n drop table t":       "DROP",
		"/*!40000 ALTER TABLE t DISABLE KEYS */": "ALTER",
		"`t`":                                    "",
		"":                                       "",
		"/* unterminated":                        "",
	} {
		if got := FirstWord(in); got != want {
			t.Errorf("FirstWord(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRequalify(t *testing.T) {
	for _, c := range [][2]string{
		{"SELECT s.t, `s`.`t`, \"s\".t, s . t FROM x", "SELECT `n`.t, `n`.`t`, `n`.t, `n` . t FROM x"},
		{"SELECT x.s.y, s_1.t, 's.t', s FROM t -- s.t", "SELECT x.s.y, s_1.t, 's.t', s FROM t -- s.t"},
		{"SELECT `a``b`.t", "SELECT `n`.t"},
	} {
		from := "s"
		if c[0] == "SELECT `a``b`.t" {
			from = "a`b"
		}
		if got := Requalify(c[0], from, "`n`"); got != c[1] {
			t.Errorf("Requalify(%q) = %q, want %q", c[0], got, c[1])
		}
	}
}
