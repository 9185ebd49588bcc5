package schemaobj

import (
	"context"
	"database/sql/driver"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Against a real server: objects are read and created in another schema
// with its name rewritten, triggers guarded then exact, events disabled then
// enabled; a trigger swap waits out a transaction that holds its table
// (bounded tries) instead of queueing behind it for ever.
func TestCreateGuardFinishOnServer(t *testing.T) {
	env := testenv.Get(t)
	db := env.DB(t, 1, "")
	ctx := context.Background()
	for _, q := range []string{
		"DROP DATABASE IF EXISTS so_src", "DROP DATABASE IF EXISTS so_dst", "CREATE DATABASE so_src", "CREATE DATABASE so_dst",
		"CREATE TABLE so_src.t (id INT PRIMARY KEY, v VARCHAR(20))", "CREATE TABLE so_dst.t (id INT PRIMARY KEY, v VARCHAR(20))",
		"CREATE TABLE so_src.log (id INT PRIMARY KEY)", "CREATE TABLE so_dst.log (id INT PRIMARY KEY)",
		"CREATE TRIGGER so_src.t_bi BEFORE INSERT ON so_src.t FOR EACH ROW SET NEW.v = CONCAT('t:', NEW.v)",
		"CREATE TRIGGER so_src.t_ai AFTER INSERT ON so_src.t FOR EACH ROW INSERT INTO so_src.log VALUES (NEW.id)",
		"CREATE VIEW so_src.v AS SELECT id, v FROM so_src.t",
		"CREATE FUNCTION so_src.f(x INT) RETURNS INT DETERMINISTIC RETURN (SELECT COUNT(*) FROM so_src.t) + x",
		"CREATE EVENT so_src.e ON SCHEDULE EVERY 1 DAY STARTS '2035-01-01 00:00:00' ON COMPLETION PRESERVE ENABLE DO DELETE FROM so_src.log WHERE id < 0",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() { db.Exec("DROP DATABASE IF EXISTS so_src"); db.Exec("DROP DATABASE IF EXISTS so_dst") })
	objs, err := Read(ctx, db, "so_src", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 5 {
		t.Fatalf("read %d objects: %v", len(objs), objs)
	}
	if _, err := Create(ctx, db, "so_dst", "so_src", objs); err != nil {
		t.Fatal(err)
	}
	var def string
	db.QueryRow("SELECT VIEW_DEFINITION FROM information_schema.VIEWS WHERE TABLE_SCHEMA = 'so_dst' AND TABLE_NAME = 'v'").Scan(&def)
	if strings.Contains(def, "so_src") || !strings.Contains(def, "so_dst") {
		t.Errorf("view not renamed: %s", def)
	}
	// Guarded: shardctl's session fires nothing, an application session does.
	conn, _ := db.Conn(ctx)
	conn.ExecContext(ctx, SkipSQL)
	if _, err := conn.ExecContext(ctx, "INSERT INTO so_dst.t VALUES (1, 'a')"); err != nil {
		t.Fatal(err)
	}
	conn.Raw(func(any) error { return driver.ErrBadConn }) // never back to the pool with the variable set
	conn.Close()
	db.Exec("INSERT INTO so_dst.t VALUES (2, 'b')")
	var logged int
	var vs string
	db.QueryRow("SELECT COUNT(*), GROUP_CONCAT(v ORDER BY id) FROM so_dst.t JOIN so_dst.log USING (id)").Scan(&logged, &vs)
	if logged != 1 || vs != "t:b" {
		t.Errorf("guarded triggers: %d logged, values %q; want only the application's row", logged, vs)
	}
	var status string
	db.QueryRow("SELECT STATUS FROM information_schema.EVENTS WHERE EVENT_SCHEMA = 'so_dst'").Scan(&status)
	if status != "DISABLED" {
		t.Errorf("event on the target before cutover: %s", status)
	}
	// A transaction holds the table for 1.5 s: the swap to exact waits it out.
	tx, _ := db.Begin()
	tx.Exec("UPDATE so_dst.t SET v = v WHERE id = 2")
	go func() { time.Sleep(1500 * time.Millisecond); tx.Commit() }()
	start := time.Now()
	if err := Finish(ctx, db, "so_dst", "so_src", objs); err != nil {
		t.Fatal(err)
	}
	t.Logf("trigger swap waited %s behind an open transaction", time.Since(start).Round(time.Millisecond))
	var guarded int
	db.QueryRow("SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = 'so_dst' AND ACTION_STATEMENT LIKE '%shardctl_skip%'").Scan(&guarded)
	db.QueryRow("SELECT STATUS FROM information_schema.EVENTS WHERE EVENT_SCHEMA = 'so_dst'").Scan(&status)
	if guarded != 0 || status != "ENABLED" {
		t.Errorf("after Finish: %d guarded triggers, event %s", guarded, status)
	}
	got, err := Read(ctx, db, "so_dst", "")
	if err != nil {
		t.Fatal(err)
	}
	for i := range objs {
		if want := Rename(objs[i].Exact(), "so_src", "so_dst"); norm(got[i].Exact()) != norm(want) {
			t.Errorf("object %s:\n got %s\nwant %s", objs[i], got[i].Exact(), want)
		}
	}
}

func norm(s string) string { return strings.Join(strings.Fields(s), " ") }
