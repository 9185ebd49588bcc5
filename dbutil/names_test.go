package dbutil

import (
	"strings"
	"testing"
)

// TestCheckSchemaNameDirectoryLength: a name within 64 characters is still
// refused when its directory name (how the servers spell it on disk) is
// over 255 bytes: the servers fail the CREATE DATABASE with "File name too
// long" (measured on MariaDB 10.11: 51 CJK characters work, 52 do not).
func TestCheckSchemaNameDirectoryLength(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{strings.Repeat("s", 64), true},
		{strings.Repeat("é", 64), true}, // @ and two characters each: 192 bytes
		{strings.Repeat("Ω", 64), true},
		{strings.Repeat("中", 51), true}, // @4e2d each: 255 bytes
		{strings.Repeat("中", 52), false},
		{strings.Repeat("中", 64), false},
		{strings.Repeat("-", 52), false}, // @002d each
	} {
		err := CheckSchemaName(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("%d × %q: err %v, want ok %v", len([]rune(tc.name)), []rune(tc.name)[0], err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "give a shorter name") {
			t.Errorf("%q: the refusal does not say what to do: %v", tc.name, err)
		}
	}
}
