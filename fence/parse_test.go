package fence_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/internal/testenv"
)

// Arming and lifting the fence within budgets so short that they run out
// while the server opens the table and parses its triggers (the
// application's and the fence's own) never leaves the table with a trigger
// the server cannot parse: every write after each attempt works.
func TestInterruptedTriggerParse(t *testing.T) {
	env := testenv.Get(t)
	db := env.DB(t, 1, "")
	const schema = "fence_parse"
	tablesAB(t, db, schema)
	exec(t, db, "INSERT INTO "+schema+".a VALUES (1)")
	// The application's own triggers, long enough that parsing them takes a
	// while and an interruption lands in it.
	body := strings.Repeat("IF NEW.id < -1000000 THEN SET NEW.id = -NEW.id; END IF; ", 60)
	for i := range 6 {
		exec(t, db, fmt.Sprintf("CREATE TRIGGER %s.app_%d BEFORE UPDATE ON %s.a FOR EACH ROW BEGIN %s END", schema, i, schema, body))
	}
	ts := []fence.Table{{Name: "a"}, {Name: "b"}}
	s, err := fence.OpenSessions(ctx, db, len(ts), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	bu := fence.TriggerPrefix + "a_bu"
	interrupted := 0
	for i := range 12 {
		if err := s.Arm(ctx, schema, ts, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		exec(t, db, "DROP TRIGGER "+dbutil.Table(schema, bu))
		exec(t, db, "FLUSH TABLES "+dbutil.Table(schema, "a")) // the next opener parses every trigger
		budget := time.Duration(1000+rand.IntN(9000)) * time.Microsecond
		if i%2 == 0 {
			err = s.Arm(ctx, schema, ts, budget)
		} else {
			err = fence.Remove(ctx, db, schema, []string{"a", "b"}, budget)
		}
		if err != nil {
			interrupted++
			if !fence.IsTimeout(err) {
				t.Fatalf("attempt %d (budget %s): %v", i, budget, err)
			}
		}
		if _, err := db.Exec("UPDATE " + dbutil.Table(schema, "a") + " SET id = id WHERE id = 1"); err != nil {
			t.Fatalf("a write after attempt %d (budget %s): %v", i, budget, err)
		}
	}
	t.Logf("%d of 12 attempts ran out of budget", interrupted)
}
