package verify

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/shardctl/shardctl/chunk"
	"github.com/shardctl/shardctl/dbutil"
)

// Between MariaDB and MySQL one column type has no text form both servers
// print alike: MySQL's JSON ({"a": 1, "b": [2]}, keys ordered by length)
// against what the same document is on MariaDB, the text it was written as
// (a copied row has MySQL's text; a row the binlog tail applied has the
// text go-mysql renders from MySQL's binary form). For such a pair the
// chunk's rows are hashed here instead of in SQL, each JSON value in one
// canonical form (keys sorted, no spaces, numbers as their float64), so a
// document compares equal whatever its spelling. Same-flavor pairs, and
// cross-flavor tables without JSON, keep the checksum in SQL.

// jsonCols marks, for a pair of servers, the columns to canonicalize: those
// JSON on either side when the flavors differ; nil when SQL can do it.
func jsonCols(cross bool, src, dst []chunk.Column) []bool {
	if !cross {
		return nil
	}
	var marks []bool
	for i, c := range src {
		if strings.EqualFold(c.Type, "JSON") || i < len(dst) && strings.EqualFold(dst[i].Type, "JSON") {
			if marks == nil {
				marks = make([]bool, len(src))
			}
			marks[i] = true
		}
	}
	return marks
}

// canonicalJSON re-renders a JSON document in one form; text that is not
// JSON is returned as it is.
func canonicalJSON(b []byte) []byte {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return b
	}
	out, err := json.Marshal(numbers(v))
	if err != nil {
		return b
	}
	return out
}

// numbers replaces each json.Number by its float64 (1.0, 1 and 1e0 agree;
// an integer beyond 2^53 keeps its digits).
func numbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
	case json.Number:
		if _, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return x
		}
		if f, err := strconv.ParseFloat(string(x), 64); err == nil {
			if f == float64(int64(f)) && f < 1<<53 && f > -(1<<53) {
				return json.Number(strconv.FormatInt(int64(f), 10))
			}
			return json.Number(strconv.FormatFloat(f, 'g', -1, 64))
		}
	}
	return v
}

// value is a column's bytes as compared: canonical JSON where marked.
func value(marks []bool, i int, raw []byte) []byte {
	if marks != nil && marks[i] && raw != nil {
		return canonicalJSON(raw)
	}
	return raw
}

// goChecksum counts the rows of cond and sums a SHA-256 of each (its
// columns' compared bytes, NULL apart from every value): order-independent,
// as the SQL checksum is.
func goChecksum(ctx context.Context, q dbutil.Querier, schema string, key chunk.Key, cols []chunk.Column, marks []bool, cond string, args []any) (int64, string, error) {
	exprs := make([]string, len(cols))
	for i, c := range cols {
		exprs[i] = c.Expr()
	}
	rows, err := q.QueryContext(ctx, "SELECT "+strings.Join(exprs, ", ")+" FROM "+dbutil.Table(schema, key.Table)+
		" FORCE INDEX ("+dbutil.QuoteIdent(key.Index)+") WHERE "+cond, args...)
	if err != nil {
		return 0, "", err
	}
	defer rows.Close()
	raw, dest := dbutil.Dest[sql.RawBytes](len(cols))
	var n int64
	var sum [4]uint64
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return 0, "", err
		}
		h := sha256.New()
		var lenBuf [9]byte
		for i, r := range raw {
			v := value(marks, i, r)
			if r == nil {
				lenBuf[0] = 0
			} else {
				lenBuf[0] = 1
			}
			binary.BigEndian.PutUint64(lenBuf[1:], uint64(len(v)))
			h.Write(lenBuf[:])
			h.Write(v)
		}
		d := h.Sum(nil)
		for j := range sum {
			sum[j] += binary.BigEndian.Uint64(d[8*j:])
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return 0, "", err
	}
	var b strings.Builder
	for _, s := range sum {
		b.WriteString(strconv.FormatUint(s, 16))
		b.WriteByte('.')
	}
	return n, b.String(), nil
}
