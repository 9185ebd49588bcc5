package chunk

import (
	"reflect"
	"strings"
	"testing"
)

func TestTuple(t *testing.T) {
	for _, c := range []struct {
		cols  []string
		op    string
		sql   string
		order []int
	}{
		{[]string{"a"}, ">", "a > ?", []int{0}},
		{[]string{"a"}, "<=", "a <= ?", []int{0}},
		{[]string{"a", "b"}, ">", "(a >= ? AND (a > ? OR (a = ? AND b > ?)))", []int{0, 0, 0, 1}},
		{[]string{"a", "b"}, "<=", "(a <= ? AND (a < ? OR (a = ? AND b <= ?)))", []int{0, 0, 0, 1}},
		{[]string{"a", "b", "c"}, ">", "(a >= ? AND (a > ? OR (a = ? AND (b > ? OR (b = ? AND c > ?)))))", []int{0, 0, 0, 1, 1, 2}},
		{[]string{"a", "b", "c"}, ">=", "(a >= ? AND (a > ? OR (a = ? AND (b > ? OR (b = ? AND c >= ?)))))", []int{0, 0, 0, 1, 1, 2}},
		{[]string{"a", "b", "c", "d"}, "<", "(a <= ? AND (a < ? OR (a = ? AND (b < ? OR (b = ? AND (c < ? OR (c = ? AND d < ?)))))))", []int{0, 0, 0, 1, 1, 2, 2, 3}},
	} {
		ph := make([]string, len(c.cols))
		for i := range ph {
			ph[i] = "?"
		}
		sql, order := Tuple(c.cols, ph, c.op)
		if sql != c.sql || !reflect.DeepEqual(order, c.order) {
			t.Errorf("Tuple(%v, %s):\n got %s %v\nwant %s %v", c.cols, c.op, sql, order, c.sql, c.order)
		}
		if strings.Count(sql, "(") != strings.Count(sql, ")") || strings.Count(sql, "?") != len(order) {
			t.Errorf("Tuple(%v, %s) is unbalanced: %s", c.cols, c.op, sql)
		}
	}
}

func TestTupleKeepsPlaceholders(t *testing.T) {
	sql, order := Tuple([]string{"`d`", "`i`"}, []string{"CAST(? AS DECIMAL(65,2))", "?"}, ">")
	want := "(`d` >= CAST(? AS DECIMAL(65,2)) AND (`d` > CAST(? AS DECIMAL(65,2)) OR (`d` = CAST(? AS DECIMAL(65,2)) AND `i` > ?)))"
	if sql != want || !reflect.DeepEqual(order, []int{0, 0, 0, 1}) {
		t.Fatalf("got %s %v", sql, order)
	}
}

func key(cols ...Column) Key {
	k, err := NewKey("s", "t", "PRIMARY", cols)
	if err != nil {
		panic(err)
	}
	return k
}

func TestCompareTypesArguments(t *testing.T) {
	k := key(
		Column{Name: "u", Type: "UNSIGNED BIGINT", Kind: Unsigned},
		Column{Name: "i", Type: "BIGINT", Kind: Signed},
		Column{Name: "b", Type: "VARBINARY", Kind: Binary},
		Column{Name: "d", Type: "DECIMAL", Kind: Decimal, Scale: 3},
		Column{Name: "s", Type: "VARCHAR", Kind: Char},
	)
	sql, args, err := k.Compare("<=", []string{"18446744073709551615", "-9223372036854775808", "0x00ff", "12345678901234567890.123", "é"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sql, "`d` < CAST(? AS DECIMAL(65,3))") || !strings.HasSuffix(sql, "`s` <= ?)))))))))") {
		t.Fatalf("sql: %s", sql)
	}
	// Placeholder order: u u u, i i, b b, d d, s.
	want := []any{uint64(18446744073709551615), uint64(18446744073709551615), uint64(18446744073709551615),
		int64(-9223372036854775808), int64(-9223372036854775808), []byte{0, 0xff}, []byte{0, 0xff},
		"12345678901234567890.123", "12345678901234567890.123", "é"}
	if !reflect.DeepEqual(args, want) {
		t.Fatalf("args\n got %#v\nwant %#v", args, want)
	}
	if _, _, err := k.Compare(">", []string{"1"}); err == nil {
		t.Fatal("a bound with too few values was accepted")
	}
	if _, _, err := k.Compare(">", []string{"x", "1", "0x", "1", "a"}); err == nil {
		t.Fatal("a non-integer bound for an integer column was accepted")
	}
	if _, _, err := k.Compare(">", []string{"1", "1", "00ff", "1", "a"}); err == nil {
		t.Fatal("a binary bound without 0x was accepted")
	}
}

func TestRange(t *testing.T) {
	k := key(Column{Name: "id", Kind: Signed})
	for _, c := range []struct {
		lo, hi []string
		sql    string
		args   []any
	}{
		{nil, nil, "1=1", nil},
		{[]string{"5"}, nil, "`id` > ?", []any{int64(5)}},
		{nil, []string{"9"}, "`id` <= ?", []any{int64(9)}},
		{[]string{"5"}, []string{"9"}, "`id` > ? AND `id` <= ?", []any{int64(5), int64(9)}},
	} {
		sql, args, err := k.Range(c.lo, c.hi)
		if err != nil || sql != c.sql || !reflect.DeepEqual(args, c.args) {
			t.Errorf("Range(%v, %v) = %s %v %v", c.lo, c.hi, sql, args, err)
		}
	}
}

func TestTextAndArgRoundTrip(t *testing.T) {
	for _, c := range []struct {
		col  Column
		raw  []byte
		text string
		arg  any
	}{
		{Column{Kind: Signed}, []byte("-42"), "-42", int64(-42)},
		{Column{Kind: Unsigned}, []byte("18446744073709551615"), "18446744073709551615", uint64(18446744073709551615)},
		{Column{Kind: Binary}, []byte{0, 'a', 0xff}, "0x0061ff", []byte{0, 'a', 0xff}},
		{Column{Kind: Binary}, []byte{}, "0x", []byte{}},
		{Column{Kind: Bit}, []byte{0x01, 0x00}, "256", uint64(256)},
		{Column{Kind: Double}, []byte("1.2345677614212036"), "1.2345677614212036", 1.2345677614212036},
		{Column{Kind: Temporal}, []byte("2024-02-29 23:59:59.999999"), "2024-02-29 23:59:59.999999", "2024-02-29 23:59:59.999999"},
		{Column{Kind: Char}, []byte("héllo"), "héllo", "héllo"},
	} {
		text := c.col.Text(c.raw)
		arg, err := c.col.Arg(text)
		if text != c.text || err != nil || !reflect.DeepEqual(arg, c.arg) {
			t.Errorf("kind %d: %q → %q → %#v (%v), want %q → %#v", c.col.Kind, c.raw, text, arg, err, c.text, c.arg)
		}
	}
}

func TestExprAndKeyable(t *testing.T) {
	if e := (Column{Name: "f", Kind: Float}).Expr(); e != "CAST(`f` AS DOUBLE)" {
		t.Fatalf("FLOAT expression %s", e)
	}
	if e := (Column{Name: "a`b", Kind: Char}).Expr(); e != "`a``b`" {
		t.Fatalf("quoting %s", e)
	}
	if _, err := NewKey("s", "t", "PRIMARY", []Column{{Name: "e", Type: "ENUM", Kind: Enum}}); err == nil {
		t.Fatal("an ENUM key without its members was accepted")
	}
	if _, err := NewKey("s", "t", "PRIMARY", []Column{{Name: "e", Type: "ENUM", Kind: Enum, Members: []string{"a"}}}); err != nil {
		t.Fatalf("an ENUM key was refused: %v", err)
	}
	if _, err := NewKey("s", "t", "PRIMARY", []Column{{Name: "g", Type: "GEOMETRY", Kind: Other}}); err == nil {
		t.Fatal("a GEOMETRY key was accepted")
	}
	if _, err := NewKey("s", "t", "PRIMARY", nil); err == nil {
		t.Fatal("an empty key was accepted")
	}
}
