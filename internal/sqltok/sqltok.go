// Package sqltok finds the identifiers of a SQL text: bare words and quoted
// names, outside string literals and comments. It is the one tokenizer
// behind the binlog tail's DDL handling (binlog/ddl.go, binlog/carry.go) and
// schemaobj.Rename.
//
// Double quotes: a "..." token is taken for a quoted identifier, as under
// ANSI_QUOTES, whatever the session's sql_mode was. Its text is never read
// for words either way, and in the default mode a double-quoted string can
// neither qualify a name ("x".t) nor be one, so treating it as a name never
// renames or matches a string in valid SQL; it only over-reports (a string
// equal to a schema's name counts as a mention), the safe direction for the
// tail. Backslash escapes are honoured inside it, as in a string, since
// that is what it is in the default mode.
//
// Executable comments (/*! ... */, /*M! ... */) are code to the server and
// are read as code: only their opening marker is skipped.
package sqltok

import (
	"iter"
	"strings"
)

// Ident is one identifier: its text (a quoted name without its quotes and
// with doubled quotes undone), where it stands (q[Start:End], quotes
// included), and whether it was quoted.
type Ident struct {
	Text       string
	Start, End int
	Quoted     bool
}

// Idents yields the identifiers of q in order. An unterminated quoted name,
// string or comment runs to the end of the text.
func Idents(q string) iter.Seq[Ident] {
	return func(yield func(Ident) bool) {
		for i := 0; i < len(q); {
			c := q[i]
			switch {
			case c == '\'':
				i, _ = skipQuoted(q, i, true)
			case c == '`' || c == '"':
				end, closed := skipQuoted(q, i, c == '"')
				body := q[i+1 : end]
				if closed {
					body = q[i+1 : end-1]
				}
				doubled := string([]byte{c, c})
				if !yield(Ident{Text: strings.ReplaceAll(body, doubled, doubled[:1]), Start: i, End: end, Quoted: true}) {
					return
				}
				i = end
			case isComment(q[i:]):
				i += commentLen(q[i:])
			case strings.HasPrefix(q[i:], "/*!"), strings.HasPrefix(q[i:], "/*M!"):
				i += executableMarkerLen(q[i:])
			case IsIdentByte(c):
				j := i
				for j < len(q) && IsIdentByte(q[j]) {
					j++
				}
				if !yield(Ident{Text: q[i:j], Start: i, End: j}) {
					return
				}
				i = j
			default:
				i++
			}
		}
	}
}

// FirstWord returns the text's first word in upper case, after whitespace
// and comments; "" when it starts with anything else (a quoted name).
func FirstWord(q string) string {
	for i := 0; i < len(q); {
		switch {
		case q[i] == ' ' || q[i] == '\t' || q[i] == '\n' || q[i] == '\r':
			i++
		case isComment(q[i:]):
			i += commentLen(q[i:])
		case strings.HasPrefix(q[i:], "/*!"), strings.HasPrefix(q[i:], "/*M!"):
			i += executableMarkerLen(q[i:])
		default:
			j := i
			for j < len(q) && IsIdentByte(q[j]) {
				j++
			}
			return strings.ToUpper(q[i:j])
		}
	}
	return ""
}

// IsIdentByte reports a byte of a bare identifier (any byte of a UTF-8
// sequence counts).
func IsIdentByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '$' || c >= 0x80
}

// skipQuoted returns the index after the quoted token starting at i and
// whether it was closed: a doubled quote stands for one, and escapes says a
// backslash escapes the next byte (strings, and double quotes: see the
// package comment).
func skipQuoted(q string, i int, escapes bool) (end int, closed bool) {
	c := q[i]
	for j := i + 1; j < len(q); j++ {
		switch q[j] {
		case '\\':
			if escapes {
				j++
			}
		case c:
			if j+1 < len(q) && q[j+1] == c {
				j++
				continue
			}
			return j + 1, true
		}
	}
	return len(q), false
}

// isComment reports a comment at the start of s: "# ...", "-- ..." (the
// dashes followed by whitespace or the end) or "/* ... */" that is not
// executable.
func isComment(s string) bool {
	switch {
	case strings.HasPrefix(s, "#"):
		return true
	case strings.HasPrefix(s, "--"):
		return len(s) == 2 || s[2] == ' ' || s[2] == '\t' || s[2] == '\n' || s[2] == '\r'
	case strings.HasPrefix(s, "/*"):
		return !strings.HasPrefix(s, "/*!") && !strings.HasPrefix(s, "/*M!")
	}
	return false
}

// commentLen is the length of the comment at the start of s (isComment).
func commentLen(s string) int {
	if strings.HasPrefix(s, "/*") {
		if j := strings.Index(s[2:], "*/"); j >= 0 {
			return j + 4
		}
		return len(s)
	}
	if j := strings.IndexByte(s, '\n'); j >= 0 {
		return j
	}
	return len(s)
}

// executableMarkerLen is the length of "/*!NNNNN" or "/*M!NNNNN" at the start of s.
func executableMarkerLen(s string) int {
	j := strings.IndexByte(s, '!') + 1
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	return j
}

// Requalify returns q with every name from that qualifies another (a '.'
// follows it, white space allowed between) and is not qualified itself
// (x.from.y: from is a table there) replaced by to, the new name already
// quoted. Strings and comments are left alone.
func Requalify(q, from, to string) string {
	var b strings.Builder
	last := 0
	for id := range Idents(q) {
		before := strings.TrimRight(q[:id.Start], " \t\r\n")
		if id.Text != from || !strings.HasPrefix(strings.TrimLeft(q[id.End:], " \t\r\n"), ".") || strings.HasSuffix(before, ".") {
			continue
		}
		b.WriteString(q[last:id.Start])
		b.WriteString(to)
		last = id.End
	}
	b.WriteString(q[last:])
	return b.String()
}
