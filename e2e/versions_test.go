package e2e

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/sandbox"
)

// TestSchemasMariaDB118: the definitions MariaDB 11.8 treats otherwise than
// 10.11, each in a shard on an 11.8 server moved back to 10.11 (the way
// back after an upgrade; the way up is TestMoveAcrossFlavors and the
// corpus's subtests): carried as they are, carried with the translation
// docs/servers.md names, or refused at planning by name with nothing
// created. Its subject is 10.11 ⇄ 11.8, so it runs in the MariaDB pass
// (the MySQL pass moves 9.7 ⇄ 11.8 in TestMoveAcrossFlavors).
func TestSchemasMariaDB118(t *testing.T) {
	testenv.FlavorNeutral(t)
	alongside(t)
	env := testenv.Get(t)
	o := testenv.Other(t, testenv.MariaDB118)
	c := newClusterAt(t, "e2e_v118", []dbutil.Addr{o.Addr(1), o.Addr(1)}, []int{40, 40}, false)
	odb := openAt(t, o.Addr(1))
	exec := func(t *testing.T, schema string, stmts ...string) {
		t.Helper()
		conn, err := odb.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		for _, s := range append([]string{"USE " + dbutil.QuoteIdent(schema)}, stmts...) {
			if _, err := conn.ExecContext(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
	}
	to := env.Addr(2).String()

	// uca1400 by default, 11.8's names for MySQL's 0900 collations, JSON,
	// UUID, INET6 and INET4: 10.11 has all but the 0900 names, which
	// become the uca1400 NO PAD collations they are aliases of.
	t.Run("uca1400_json_uuid_inet", func(t *testing.T) {
		sh := c.shards[0]
		exec(t, sh.Schema,
			"CREATE TABLE kinds (emp_no INT NOT NULL PRIMARY KEY, name VARCHAR(40) NOT NULL, alias VARCHAR(40) COLLATE utf8mb4_de_pb_0900_ai_ci, doc JSON, u UUID, a6 INET6, a4 INET4, KEY (name)) DEFAULT CHARSET=utf8mb4",
			"INSERT INTO kinds SELECT seq, CONCAT('Émile ', seq), CONCAT('Straße ', seq), JSON_OBJECT('k', seq, 'a', JSON_ARRAY(1, 'x')), UUID(), CONCAT('2001:db8::', HEX(seq)), CONCAT('10.0.0.', seq % 250) FROM seq_1_to_300")
		var n, ddl string
		if err := odb.QueryRow("SHOW CREATE TABLE "+dbutil.Table(sh.Schema, "kinds")).Scan(&n, &ddl); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(ddl, "COLLATE=utf8mb4_uca1400_ai_ci") {
			t.Fatalf("11.8 did not give the table its default uca1400 collation:\n%s", ddl)
		}
		var dry struct {
			Translations []struct{ Object, Column, From, To string }
		}
		if err := json.Unmarshal([]byte(c.mustRun("move", "--shard", fmt.Sprint(sh.ShardID), "--to", to, "--dry-run", "-o", "json").stdout), &dry); err != nil {
			t.Fatal(err)
		}
		if len(dry.Translations) != 1 || dry.Translations[0].To != "COLLATE utf8mb4_uca1400_german2_nopad_ai_ci" {
			t.Errorf("--dry-run's translations: %+v, want the one of the 0900 alias", dry.Translations)
		}
		// Rows written during the catch-up reach 10.11 through the binlog,
		// where UUID and INET6 travel in their binary forms.
		hold, done, out := startHeld(t, c, "during:catchup", "", []string{"move", "--shard", fmt.Sprint(sh.ShardID), "--to", to, "--yes", "--chunk-rows", "100"})
		exec(t, sh.Schema,
			"INSERT INTO kinds SELECT seq, CONCAT('Zoë ', seq), 'ß', JSON_OBJECT('k', seq), UUID(), CONCAT('fe80::', HEX(seq)), '192.168.0.1' FROM seq_301_to_350",
			"UPDATE kinds SET u = UUID(), a6 = '::1', a4 = '127.0.0.1', doc = JSON_ARRAY(emp_no) WHERE emp_no <= 20",
			"UPDATE kinds SET u = NULL, a6 = NULL WHERE emp_no BETWEEN 21 AND 25")
		before := testenv.Dump(t, odb, "SELECT * FROM "+dbutil.Table(sh.Schema, "kinds"))
		sort.Strings(before)
		if err := os.Remove(hold); err != nil {
			t.Fatal(err)
		}
		if code := <-done; code != 0 {
			t.Fatalf("the move from 11.8 to 10.11 ended with exit %d:\n%s", code, out.String())
		}
		home := c.db(2)
		after := testenv.Dump(t, home, "SELECT * FROM "+dbutil.Table(sh.Schema, "kinds"))
		sort.Strings(after)
		if strings.Join(before, "\n") != strings.Join(after, "\n") {
			t.Errorf("the rows differ on 10.11 (%d rows, want %d)", len(after), len(before))
		}
		if err := home.QueryRow("SHOW CREATE TABLE "+dbutil.Table(sh.Schema, "kinds")).Scan(&n, &ddl); err != nil {
			t.Fatal(err)
		}
		for _, w := range []string{"COLLATE=utf8mb4_uca1400_ai_ci", "COLLATE utf8mb4_uca1400_german2_nopad_ai_ci", "`u` uuid", "`a6` inet6", "`a4` inet4", "CHECK (json_valid(`doc`))"} {
			if !strings.Contains(ddl, w) {
				t.Errorf("on 10.11 the table lacks %q:\n%s", w, ddl)
			}
		}
	})

	// VECTOR columns and indexes (11.7+), a collation 10.11 has no
	// equivalent of, and a routine calling 11.7's functions: refused at
	// planning by name, nothing created on 10.11.
	t.Run("vector_refused", func(t *testing.T) {
		sh := c.shards[1]
		exec(t, sh.Schema,
			"CREATE TABLE embeddings (emp_no INT NOT NULL PRIMARY KEY, v VECTOR(3) NOT NULL, VECTOR INDEX vi (v))",
			"INSERT INTO embeddings VALUES (1, VEC_FromText('[1,2,3]'))",
			"CREATE TABLE notes (emp_no INT NOT NULL PRIMARY KEY, s VARCHAR(10) COLLATE utf8mb4_general1400_as_ci)",
			"CREATE FUNCTION nearest(a VECTOR(3)) RETURNS DOUBLE DETERMINISTIC RETURN VEC_DISTANCE_EUCLIDEAN(a, VEC_FromText('[0,0,0]'))")
		for _, args := range [][]string{{"--dry-run"}, {"--yes"}} {
			r := c.run(nil, append([]string{"move", "--shard", fmt.Sprint(sh.ShardID), "--to", to}, args...)...)
			for _, w := range []string{"table embeddings column `v`", "has no VECTOR type", "table embeddings index `vi`", "table notes column `s`", "utf8mb4_general1400_as_ci", "function nearest", "VEC_"} {
				if r.code != 2 || !strings.Contains(r.stderr, w) {
					t.Errorf("move %v of an 11.8 shard with VECTOR to 10.11: exit %d, want 2 naming %q\n%s", args, r.code, w, r.stderr)
				}
			}
		}
		if schemaExists(t, c.db(2), sh.Schema) {
			t.Error("the refused move created the target schema on 10.11")
		}
		// Towards MySQL, whose VECTOR is not carried either.
		my := testenv.OtherFlavor(t).Addr(1).String()
		if r := c.run(nil, "move", "--shard", fmt.Sprint(sh.ShardID), "--to", my, "--dry-run"); r.code != 2 || !strings.Contains(r.stderr, "table embeddings column `v`: MariaDB's VECTOR type is not carried to MySQL's") {
			t.Errorf("move of an 11.8 shard with VECTOR to MySQL: exit %d, want 2 naming the column\n%s", r.code, r.stderr)
		}
	})
}

// TestDrainOntoMariaDB118: an upgrade by rebalance: 'rebalance --drain OLD
// --server NEW' under the ledger load moves every shard off a 10.11 server
// onto an 11.8 one; the ledger is clean and no row changed.
func TestDrainOntoMariaDB118(t *testing.T) {
	testenv.FlavorNeutral(t) // 10.11 → 11.8 is the MariaDB pass's; the MySQL pass moves 9.7 ⇄ 11.8 in TestMoveAcrossFlavors
	alongside(t)
	o := testenv.Other(t, testenv.MariaDB118)
	c := newCluster(t, "e2e_vdrain", []int{3, 3}, []int{200, 200})
	groups := []string{c.keys("a", 1, 200), c.keys("b", 2, 200)}
	// The rows the load does not touch, per shard, before and after.
	sums := func(db func(int) *sql.DB) []map[string]string {
		var out []map[string]string
		for i, sh := range c.shards {
			out = append(out, tableSums(t, db(i), sh.Schema, c.untouchedBelow(i+1, 200)))
		}
		return out
	}
	before := sums(func(int) *sql.DB { return c.db(3) })
	lp := c.startLoad(60, groups...)
	old, up := c.env.Addr(3).String(), o.Addr(1).String()
	r := c.mustRun("rebalance", "--drain", old, "--server", up, "--exact", "--chunk-rows", "100", "--max-blackout", "5s", "-o", "json", "--apply")
	var drained rebalanceOut
	if err := json.Unmarshal([]byte(r.stdout), &drained); err != nil {
		t.Fatal(err)
	}
	if len(drained.Finished) != 2 || drained.ops() != "move,move" {
		t.Errorf("drain onto 11.8: %s", r.stdout)
	}
	m, err := c.store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range m.Locations {
		if l.Addr().String() != up {
			t.Errorf("shard %d is at %s after the drain, want the 11.8 server %s", l.ShardID, l.Addr(), up)
		}
	}
	lp.stop(t)
	c.checkLedger(lp)
	odb := openAt(t, o.Addr(1))
	for i, after := range sums(func(int) *sql.DB { return odb }) {
		if !sameSums(before[i], after) {
			t.Errorf("shard %d on 11.8: the rows the load does not touch differ: before %v, after %v", i+1, before[i], after)
		}
	}
}

// TestUnknownServerVersionRefused: a server that reports a version shardctl
// does not know (MariaDB 12.0, by its --version setting) is refused at
// preflight, exit 2, naming it, its version and the versions shardctl
// knows; nothing is created on it. The check is shardctl's own logic
// (dbutil.Flavor.Known; MySQL cannot report another version), so it runs in
// the MariaDB pass.
func TestUnknownServerVersionRefused(t *testing.T) {
	testenv.FlavorNeutral(t)
	alongside(t)
	newer := testenv.OwnWith(t, 1, func(c *sandbox.Config) { c.ExtraArgs = append(c.ExtraArgs, "--version=12.0.1-MariaDB") })
	c := newCluster(t, "e2e_vunknown", []int{2}, []int{20})
	to := newer.Addr(1).String()
	for _, args := range [][]string{{"--dry-run"}, {"--yes"}} {
		r := c.run(nil, append([]string{"move", "--shard", "1", "--to", to}, args...)...)
		for _, w := range []string{"the target " + to + " runs mariadb 12.0.1-MariaDB", "a version shardctl does not know", "MariaDB 10.6 to 11.8"} {
			if r.code != 2 || !strings.Contains(r.stderr, w) {
				t.Errorf("move %v to a MariaDB 12.0: exit %d, want 2 naming %q\n%s", args, r.code, w, r.stderr)
			}
		}
	}
	if schemaExists(t, openAt(t, newer.Addr(1)), c.shards[0].Schema) {
		t.Error("the refused move created the target schema")
	}
}
