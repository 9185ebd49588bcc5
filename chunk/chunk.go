// Package chunk is the keyset machinery that snapshot, verify and prune share:
// column kinds as the server reports them, the SQL of tuple comparisons on a
// primary key (rendered so MariaDB walks the index), and the query that finds
// where a chunk ends. Key values travel as text (what checkpoints store) and
// are turned back into arguments the server compares exactly.
package chunk

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/shardctl/shardctl/dbutil"
)

// Kind says how a column's values are read, written and compared.
type Kind uint8

const (
	Other    Kind = iota // anything else (GEOMETRY, VECTOR…): forwarded as bytes, never a key
	Char                 // character strings: forwarded as Go strings so the server converts them to the column's charset
	Temporal             // DATE, TIME, DATETIME, TIMESTAMP: compared from their text
	Binary               // binary strings: forwarded as []byte; as a key, written as 0x-hex text
	Signed               // signed integers and YEAR: int64 arguments
	Unsigned             // unsigned integers: uint64 arguments
	Decimal              // exact decimals: compared through CAST(? AS DECIMAL(65,scale))
	Float                // FLOAT: read through CAST(… AS DOUBLE), its plain text keeps only 6 digits
	Double               // DOUBLE: its text is the shortest exact form
	Bit                  // BIT: raw bytes on the wire; as a key, decimal text and uint64 arguments
	Enum                 // ENUM and SET: they sort by their number (index, bit set); as a key, that number's decimal text
)

// Column is one column of a table with what the server said about its type.
type Column struct {
	Name  string
	Type  string // DatabaseTypeName as the driver reports it
	Kind  Kind
	Scale int64 // DECIMAL scale
	Null  bool  // may hold NULL (true when the driver cannot tell)
	// Members are an ENUM's or SET's values in definition order (Probe
	// reads them): a key value's text is turned into its number with them.
	Members []string
}

// ColumnOf classifies a result column.
func ColumnOf(name string, ct *sql.ColumnType) Column {
	c := Column{Name: name, Type: ct.DatabaseTypeName(), Null: true}
	if n, ok := ct.Nullable(); ok {
		c.Null = n
	}
	t := c.Type
	switch {
	case strings.HasPrefix(t, "UNSIGNED "):
		c.Kind = Unsigned
	case t == "TINYINT", t == "SMALLINT", t == "MEDIUMINT", t == "INT", t == "BIGINT", t == "YEAR":
		c.Kind = Signed
	case t == "DECIMAL":
		c.Kind = Decimal
		if _, s, ok := ct.DecimalSize(); ok {
			c.Scale = s
		}
	case t == "FLOAT":
		c.Kind = Float
	case t == "DOUBLE":
		c.Kind = Double
	case t == "BIT":
		c.Kind = Bit
	case t == "DATE", t == "TIME", t == "DATETIME", t == "TIMESTAMP":
		c.Kind = Temporal
	case t == "CHAR", t == "VARCHAR", t == "JSON" || strings.HasSuffix(t, "TEXT"):
		c.Kind = Char
	case t == "BINARY", t == "VARBINARY", strings.HasSuffix(t, "BLOB"):
		c.Kind = Binary
	case t == "ENUM", t == "SET":
		c.Kind = Enum
	}
	return c
}

// Probe returns the columns named names of schema.table, typed by a LIMIT 0 query.
func Probe(ctx context.Context, q dbutil.Querier, schema, table string, names []string) ([]Column, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("table %s.%s: no columns given", schema, table)
	}
	rows, err := q.QueryContext(ctx, "SELECT "+dbutil.QuoteIdents(names)+" FROM "+dbutil.Table(schema, table)+" LIMIT 0")
	if err != nil {
		return nil, fmt.Errorf("read column types of %s.%s: %w", schema, table, err)
	}
	defer rows.Close()
	cts, err := rows.ColumnTypes()
	if err != nil {
		return nil, fmt.Errorf("read column types of %s.%s: %w", schema, table, err)
	}
	out := make([]Column, len(names))
	enums := false
	for i, ct := range cts {
		out[i] = ColumnOf(names[i], ct)
		enums = enums || out[i].Kind == Enum
	}
	// Closed before the members are read: a pinned connection runs one query at a time.
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if enums {
		if err := loadMembers(ctx, q, schema, table, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// loadMembers fills the Members of the ENUM and SET columns among cols.
func loadMembers(ctx context.Context, q dbutil.Querier, schema, table string, cols []Column) error {
	types := map[string]string{}
	var name, typ string
	if err := dbutil.ScanEach(ctx, q, "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
		[]any{schema, table}, []any{&name, &typ}, func() error { types[name] = typ; return nil }); err != nil {
		return fmt.Errorf("read the ENUM and SET members of %s.%s: %w", schema, table, err)
	}
	for i, c := range cols {
		if c.Kind != Enum {
			continue
		}
		m, err := ParseMembers(types[c.Name])
		if err != nil {
			return fmt.Errorf("table %s.%s column %s: %w", schema, table, c.Name, err)
		}
		cols[i].Members = m
	}
	return nil
}

// ParseMembers reads the members of a COLUMN_TYPE such as enum('a','b'):
// in a value, a quote is doubled and a backslash escapes what SHOW and
// information_schema escape.
func ParseMembers(colType string) ([]string, error) {
	open := strings.IndexByte(colType, '(')
	if open < 0 || !strings.HasSuffix(colType, ")") {
		return nil, fmt.Errorf("cannot read the members of %q", colType)
	}
	body := colType[open+1 : len(colType)-1]
	var out []string
	for i := 0; i < len(body); {
		if body[i] != '\'' {
			return nil, fmt.Errorf("cannot read the members of %q", colType)
		}
		var b strings.Builder
		i++
		for ; ; i++ {
			if i >= len(body) {
				return nil, fmt.Errorf("cannot read the members of %q: unterminated value", colType)
			}
			c := body[i]
			if c == '\'' {
				if i+1 < len(body) && body[i+1] == '\'' {
					b.WriteByte('\'')
					i++
					continue
				}
				i++
				break
			}
			if c == '\\' && i+1 < len(body) {
				i++
				switch body[i] {
				case 'n':
					c = '\n'
				case 'r':
					c = '\r'
				case 't':
					c = '\t'
				case '0':
					c = 0
				case 'Z':
					c = 26
				default:
					c = body[i]
				}
			}
			b.WriteByte(c)
		}
		out = append(out, b.String())
		if i < len(body) {
			if body[i] != ',' {
				return nil, fmt.Errorf("cannot read the members of %q", colType)
			}
			i++
		}
	}
	return out, nil
}

// Generated names the generated (virtual or stored) columns of schema.table:
// the server computes them, so they are never written.
func Generated(ctx context.Context, q dbutil.Querier, schema, table string) (map[string]bool, error) {
	gen := map[string]bool{}
	var n string
	err := dbutil.ScanEach(ctx, q, `SELECT COLUMN_NAME FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND COALESCE(GENERATION_EXPRESSION, '') <> ''`, []any{schema, table},
		[]any{&n}, func() error { gen[n] = true; return nil })
	return gen, err
}

// Expr is the select expression that yields the column's exact text form.
func (c Column) Expr() string {
	if c.Kind == Float {
		return "CAST(" + dbutil.QuoteIdent(c.Name) + " AS DOUBLE)"
	}
	return dbutil.QuoteIdent(c.Name)
}

// keyable reports whether keyset pagination on the column is exact.
func (c Column) keyable() bool {
	switch c.Kind {
	case Char, Temporal, Binary, Signed, Unsigned, Decimal, Float, Double, Bit:
		return true
	case Enum:
		return c.Members != nil
	}
	return false
}

// Text is a key value's checkpoint form: the server's text, except binary
// strings (0x-hex, so checkpoints stay valid JSON), BIT (decimal) and ENUM
// and SET (their number, in whose order the index sorts them; a value that
// is no member stays text, which Arg refuses).
func (c Column) Text(raw []byte) string {
	switch c.Kind {
	case Binary:
		return "0x" + hex.EncodeToString(raw)
	case Bit:
		return new(big.Int).SetBytes(raw).String()
	case Enum:
		if n, ok := c.number(string(raw)); ok {
			return strconv.FormatUint(n, 10)
		}
	}
	return string(raw)
}

// number is an ENUM value's index (0: the empty error value) or a SET
// value's bits.
func (c Column) number(v string) (uint64, bool) {
	if c.Type == "SET" {
		var n uint64
		if v == "" {
			return 0, true
		}
		for _, part := range strings.Split(v, ",") {
			i := slices.Index(c.Members, part)
			if i < 0 || i > 63 {
				return 0, false
			}
			n |= 1 << i
		}
		return n, true
	}
	if i := slices.Index(c.Members, v); i >= 0 {
		return uint64(i + 1), true
	}
	return 0, v == ""
}

// Arg turns a key value's text back into the argument the server compares
// exactly: integers as integers (a string constant would be compared as a
// DOUBLE, inexact above 2^53), binary strings as bytes, the rest as text.
func (c Column) Arg(text string) (any, error) {
	switch c.Kind {
	case Signed:
		return strconv.ParseInt(text, 10, 64)
	case Unsigned, Bit:
		return strconv.ParseUint(text, 10, 64)
	case Enum:
		n, err := strconv.ParseUint(text, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s value %q is none of the column's members", c.Type, text)
		}
		return n, nil
	case Float, Double:
		return strconv.ParseFloat(text, 64)
	case Binary:
		h, ok := strings.CutPrefix(text, "0x")
		if !ok {
			return nil, fmt.Errorf("binary key value %q lacks its 0x prefix", text)
		}
		b, err := hex.DecodeString(h)
		if err != nil {
			return nil, err
		}
		if b == nil {
			b = []byte{} // nil would be sent as NULL
		}
		return b, nil
	}
	return text, nil
}

// Value is the argument that writes a value read as raw (the column's Expr)
// back: NULL as nil, BIT as a number (MySQL refuses its raw bytes as a
// string parameter, error 3988), the rest as a copy of its bytes.
func (c Column) Value(raw []byte) any {
	switch {
	case raw == nil:
		return nil
	case c.Kind == Bit:
		var n uint64
		for _, b := range raw {
			n = n<<8 | uint64(b)
		}
		return n
	case c.Type == "YEAR" && string(raw) == "0":
		// The driver reads YEAR's text "0000" as the number 0; as text, a
		// YEAR of '0' is 2000.
		return []byte("0000")
	}
	return append([]byte{}, raw...)
}

// Placeholder is the column's argument placeholder. DECIMAL goes through a
// cast: a DECIMAL compared with a string constant is compared as a DOUBLE.
func (c Column) Placeholder() string {
	if c.Kind == Decimal {
		return "CAST(? AS DECIMAL(65," + strconv.FormatInt(min(max(c.Scale, 0), 30), 10) + "))"
	}
	return "?"
}

// UTC is the statement that pins a session's time zone, so TIMESTAMP values
// read on one server and written or compared on another mean the same instant
// and no daylight-saving hour is ambiguous.
const UTC = "SET SESSION time_zone = '+00:00'"

// Session pins a connection of db and runs setup on it. Session settings
// would leak to whoever gets the connection next, so Release closes it
// instead of returning it to the pool.
func Session(ctx context.Context, db *sql.DB, setup ...string) (*sql.Conn, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range setup {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			Release(conn)
			return nil, err
		}
	}
	return conn, nil
}

// Release closes a connection from Session, dropping it from the pool.
func Release(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}
