package dbutil

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxIdentLen is the longest schema, table or column name MySQL and MariaDB
// accept, in characters.
const MaxIdentLen = 64

// CheckSchemaName refuses a name no server accepts as a schema, or that is
// not portable between them ("Incorrect database name" otherwise comes only
// when a run creates the schema, after the plan was made).
func CheckSchemaName(name string) error {
	switch n := utf8.RuneCountInString(name); {
	case name == "":
		return fmt.Errorf("an empty schema name")
	case !utf8.ValidString(name):
		return fmt.Errorf("schema name %q is not valid UTF-8", name)
	case n > MaxIdentLen:
		return fmt.Errorf("schema name %q has %d characters; the servers allow at most %d", name, n, MaxIdentLen)
	case strings.HasSuffix(name, " "):
		return fmt.Errorf("schema name %q ends with a space, which the servers refuse", name)
	case strings.ContainsAny(name, "/\\.\x00"):
		return fmt.Errorf("schema name %q contains '/', '\\', '.' or NUL, which are not valid in a schema name on every server", name)
	}
	for _, r := range name {
		if r > 0xFFFF {
			return fmt.Errorf("schema name %q contains %q, outside the servers' identifier characters (U+0001 to U+FFFF)", name, r)
		}
	}
	return nil
}
