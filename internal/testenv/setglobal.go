package testenv

import (
	"database/sql"
	"strconv"
	"testing"
)

// SetGlobal sets a server variable for the test and puts it back after.
func SetGlobal(t *testing.T, db *sql.DB, name string, value any) {
	t.Helper()
	var old string
	if err := db.QueryRow("SELECT @@GLOBAL." + name).Scan(&old); err != nil {
		t.Fatal(err)
	}
	Exec(t, db, "SET GLOBAL "+name+" = ?", value)
	var back any = old
	if n, err := strconv.ParseInt(old, 10, 64); err == nil {
		back = n // a numeric variable refuses its value as a string (1232)
	}
	t.Cleanup(func() {
		if _, err := db.Exec("SET GLOBAL "+name+" = ?", back); err != nil {
			t.Errorf("put %s back to %s: %v", name, old, err)
		}
	})
}
