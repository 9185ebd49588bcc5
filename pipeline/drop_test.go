package pipeline

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/sandbox"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// A <table>.TRG- backup that MariaDB left in a schema's directory makes DROP
// DATABASE fail (1010); dbutil.DropSchema clears it and drops the schema.
func TestDropSchemaClearsTriggerBackups(t *testing.T) {
	if testenv.Flavor() == sandbox.FlavorMySQL {
		t.Skip("MySQL keeps triggers in its data dictionary")
	}
	env := testenv.Get(t)
	db := env.DB(t, 1, "")
	ctx := context.Background()
	for _, q := range []string{"DROP DATABASE IF EXISTS drop_trg", "CREATE DATABASE drop_trg", "CREATE TABLE drop_trg.t (id INT PRIMARY KEY)",
		"CREATE TRIGGER drop_trg.t_bi BEFORE INSERT ON drop_trg.t FOR EACH ROW SET @x = 1"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var dir string
	if err := db.QueryRow("SELECT @@datadir").Scan(&dir); err != nil {
		t.Fatal(err)
	}
	trg, err := os.ReadFile(filepath.Join(dir, "drop_trg", "t.TRG"))
	if err != nil {
		if os.Getenv("CI") != "" { // the sandbox runs on this machine in CI: this must not hide a failure
			t.Fatalf("read the trigger file: %v", err)
		}
		t.Skipf("the server's data directory is not readable here: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "drop_trg", "t.TRG-"), trg, 0o660); err != nil {
		t.Fatal(err)
	}
	if err := dbutil.DropSchema(ctx, db, "drop_trg", []string{"t"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "drop_trg")); !os.IsNotExist(err) {
		t.Fatalf("schema directory left: %v", err)
	}
}
