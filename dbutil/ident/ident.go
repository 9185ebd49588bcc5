// Package ident quotes MySQL identifiers. It needs no database, so a program
// that only reads and prints plans (package plans) can quote names without
// linking the SQL driver; dbutil re-exports it for everything else.
package ident

import "strings"

// Quote quotes a MySQL identifier with backticks, doubling any backtick inside it.
func Quote(name string) string {
	return "`" + strings.ReplaceAll(name, "`", "``") + "`"
}

// QuoteList quotes each name and joins them with ", ".
func QuoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = Quote(n)
	}
	return strings.Join(q, ", ")
}

// Table returns `schema`.`table`.
func Table(schema, table string) string {
	return Quote(schema) + "." + Quote(table)
}

// Placeholders returns "?, ?, ?" for n values.
func Placeholders(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("?, ", n-1) + "?"
}
