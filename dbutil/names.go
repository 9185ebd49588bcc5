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
	if n := dirNameLen(name); n > MaxDirNameLen {
		return fmt.Errorf("schema name %q is %d bytes as the servers' directory name (a character other than a letter, digit or _ takes 3 or 5), over the file system's %d: give a shorter name", name, n, MaxDirNameLen)
	}
	return nil
}

// MaxDirNameLen is the longest file name the servers' file systems take
// (NAME_MAX); a schema is a directory of the data directory.
const MaxDirNameLen = 255

// dirNameLen is the length of a schema's directory name, spelled as the
// servers spell it (the "filename" character set): ASCII letters, digits and
// _ as they are; a letter of the blocks with a short code (Latin, Greek,
// Cyrillic, Armenian, number forms, circled and full-width letters) as @
// and two characters; anything else as @ and four hex digits. The few
// unassigned code points inside those blocks take five, so a name of them
// can still pass here and be refused by the server.
func dirNameLen(name string) int {
	n := 0
	for _, r := range name {
		switch {
		case r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '_':
			n++
		case r >= 0x00C0 && r <= 0x02AF, r >= 0x0370 && r <= 0x058F, r >= 0x1E00 && r <= 0x1FFF,
			r >= 0x2160 && r <= 0x217F, r >= 0x24B6 && r <= 0x24E9, r >= 0xFF21 && r <= 0xFF5A:
			n += 3
		default:
			n += 5
		}
	}
	return n
}
