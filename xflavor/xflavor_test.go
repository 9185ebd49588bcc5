package xflavor

import (
	"strings"
	"testing"

	"github.com/shardctl/shardctl/schemaobj/objdef"
)

var (
	toMySQL   = Rules{Dir: ToMySQL}
	toMariaDB = Rules{Dir: ToMariaDB}
)

func table(cols ...string) string {
	return "CREATE TABLE `t` (\n  " + strings.Join(cols, ",\n  ") + "\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci"
}

// one translates a table of the given elements and returns the elements
// out, the translations and the refusals as text.
func one(t *testing.T, x Rules, cols ...string) (string, []string, []string) {
	t.Helper()
	out, res := x.Table("t", table(cols...))
	var tr, rf []string
	for _, c := range res.Translations {
		tr = append(tr, c.String())
	}
	for _, r := range res.Refusals {
		rf = append(rf, r.String())
	}
	lines := strings.Split(out, "\n")
	return strings.Join(lines[1:len(lines)-1], "\n"), tr, rf
}

func TestSameFlavorTranslatesNothing(t *testing.T) {
	ddl := table("`a` inet6 DEFAULT NULL")
	if out, res := (Rules{Dir: Between(false, false)}).Table("t", ddl); out != ddl || len(res.Translations)+len(res.Refusals) != 0 {
		t.Fatalf("same flavor: %q %+v", out, res)
	}
	if Between(false, true) != ToMySQL || Between(true, false) != ToMariaDB || Between(true, true) != Same {
		t.Fatal("Between")
	}
}

func TestCollations(t *testing.T) {
	for _, c := range []struct {
		x        Rules
		from, to string
		ok       bool
	}{
		{toMySQL, "utf8mb4_uca1400_ai_ci", "utf8mb4_0900_ai_ci", true},
		{toMySQL, "utf8mb4_uca1400_nopad_as_cs", "utf8mb4_0900_as_cs", true},
		{toMySQL, "utf8mb4_uca1400_swedish_ai_ci", "utf8mb4_sv_0900_ai_ci", true},
		{toMySQL, "utf8mb4_uca1400_spanish2_as_cs", "utf8mb4_es_trad_0900_as_cs", true},
		{toMySQL, "utf8mb4_uca1400_persian_ai_ci", "", false}, // MySQL has no Persian tailoring
		{toMySQL, "utf8mb3_uca1400_ai_ci", "", false},
		{toMySQL, "utf8mb4_nopad_bin", "utf8mb4_0900_bin", true},
		{toMySQL, "utf8mb4_general_nopad_ci", "", false},
		{toMySQL, "utf8mb4_general_ci", "utf8mb4_general_ci", true},
		{toMariaDB, "utf8mb4_0900_ai_ci", "utf8mb4_uca1400_nopad_ai_ci", true},
		{toMariaDB, "utf8mb4_0900_as_ci", "utf8mb4_uca1400_nopad_as_ci", true},
		{toMariaDB, "utf8mb4_sv_0900_as_cs", "utf8mb4_uca1400_swedish_nopad_as_cs", true},
		{toMariaDB, "utf8mb4_de_pb_0900_ai_ci", "utf8mb4_uca1400_german2_nopad_ai_ci", true},
		{toMariaDB, "utf8mb4_0900_bin", "utf8mb4_nopad_bin", true},
		{toMariaDB, "utf8mb4_ja_0900_as_cs", "", false},
		{toMariaDB, "utf8mb4_bin", "utf8mb4_bin", true},
	} {
		to, _, ok := c.x.Collation(c.from)
		if ok != c.ok || ok && to != c.to {
			t.Errorf("%v: %s -> %s %v, want %s %v", c.x.Dir, c.from, to, ok, c.to, c.ok)
		}
	}
	// A name the target lacks is refused even where the rule maps it.
	x := Rules{Dir: ToMySQL, Collations: map[string]bool{"utf8mb4_general_ci": true}}
	if _, _, ok := x.Collation("utf8mb4_uca1400_ai_ci"); ok {
		t.Error("a translated collation the target lacks was accepted")
	}
}

func TestCollationsInATable(t *testing.T) {
	out, tr, rf := one(t, toMySQL, "`a` varchar(5) CHARACTER SET utf8mb4 COLLATE utf8mb4_uca1400_ai_ci DEFAULT NULL", "PRIMARY KEY (`a`)")
	if !strings.Contains(out, "COLLATE utf8mb4_0900_ai_ci") || len(tr) != 1 || !strings.Contains(tr[0], "column `a`") || rf != nil {
		t.Fatalf("%s\n%v %v", out, tr, rf)
	}
	full, res := toMariaDB.Table("t", "CREATE TABLE `t` (\n  `a` int NOT NULL,\n  PRIMARY KEY (`a`)\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_0900_ai_ci")
	if !strings.HasSuffix(full, "COLLATE=utf8mb4_uca1400_nopad_ai_ci") || len(res.Translations) != 1 {
		t.Fatalf("table default collation: %s %+v", full, res)
	}
	if c, res := toMySQL.Schema("s", "utf8mb4_uca1400_ai_ci"); c != "utf8mb4_0900_ai_ci" || len(res.Translations) != 1 {
		t.Fatalf("schema collation: %s %+v", c, res)
	}
}

func TestMariaDBTypesAreRefusedByColumn(t *testing.T) {
	for typ, alt := range map[string]string{"inet6": "VARCHAR(39)", "uuid": "CHAR(36)", "inet4": "VARCHAR(15)"} {
		_, _, rf := one(t, toMySQL, "`id` int(11) NOT NULL", "`addr` "+typ+" DEFAULT NULL", "PRIMARY KEY (`id`)")
		if len(rf) != 1 || !strings.Contains(rf[0], "table t column `addr`") || !strings.Contains(rf[0], alt) {
			t.Errorf("%s: %v", typ, rf)
		}
	}
}

func TestUUIDDefaultGetsParentheses(t *testing.T) {
	out, tr, rf := one(t, toMySQL, "`u` char(36) DEFAULT uuid()", "`d` date DEFAULT curdate()", "`ts` datetime(3) DEFAULT current_timestamp(3) ON UPDATE current_timestamp(3)", "`e` int(11) DEFAULT (1 + 2)")
	want := "  `u` char(36) DEFAULT (uuid()),\n  `d` date DEFAULT (curdate()),\n  `ts` datetime(3) DEFAULT current_timestamp(3) ON UPDATE current_timestamp(3),\n  `e` int(11) DEFAULT (1 + 2)"
	if out != want || len(tr) != 2 || rf != nil {
		t.Fatalf("got\n%s\nwant\n%s\n%v %v", out, want, tr, rf)
	}
}

func TestInvisibleColumns(t *testing.T) {
	// MariaDB's INVISIBLE is MySQL's (8.0.23+): kept.
	out, tr, _ := one(t, toMySQL, "`v` int(11) INVISIBLE DEFAULT NULL")
	if out != "  `v` int(11) INVISIBLE DEFAULT NULL" || tr != nil {
		t.Fatalf("%s %v", out, tr)
	}
	// MySQL prints it in a versioned comment MariaDB would skip.
	out, tr, _ = one(t, toMariaDB, "`v` int DEFAULT NULL /*!80023 INVISIBLE */")
	if out != "  `v` int DEFAULT NULL INVISIBLE" || len(tr) != 1 {
		t.Fatalf("%s %v", out, tr)
	}
}

func TestCompressedColumnsAreStoredPlain(t *testing.T) {
	out, tr, rf := one(t, toMySQL, "`z` text /*M!100301 COMPRESSED*/ DEFAULT NULL")
	if out != "  `z` text DEFAULT NULL" || len(tr) != 1 || !strings.Contains(tr[0], "COMPRESSED") || rf != nil {
		t.Fatalf("%s %v %v", out, tr, rf)
	}
}

func TestSequencesAndSystemVersioningAreRefused(t *testing.T) {
	if _, res := toMySQL.Table("s", "CREATE SEQUENCE `s` start with 1 minvalue 1 maxvalue 9223372036854775806 increment by 1 cache 1000 nocycle ENGINE=InnoDB"); len(res.Refusals) != 1 || !strings.Contains(res.Refusals[0].What, "sequence") {
		t.Fatalf("sequence: %+v", res)
	}
	ddl := "CREATE TABLE `h` (\n  `id` int(11) NOT NULL,\n  PRIMARY KEY (`id`)\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci WITH SYSTEM VERSIONING"
	if _, res := toMySQL.Table("h", ddl); len(res.Refusals) != 1 || !strings.Contains(res.Err().Error(), "table h: system versioning") {
		t.Fatalf("system versioning: %+v", res)
	}
	_, _, rf := one(t, toMySQL, "`s` timestamp(6) GENERATED ALWAYS AS ROW START", "PERIOD FOR SYSTEM_TIME (`s`, `e`)")
	if len(rf) != 2 {
		t.Fatalf("row start and period: %v", rf)
	}
}

func TestMariaDBTableOptionsAreDropped(t *testing.T) {
	full, res := toMySQL.Table("t", "CREATE TABLE `t` (\n  `a` int(11) NOT NULL,\n  PRIMARY KEY (`a`)\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci `PAGE_COMPRESSED`='ON'")
	if strings.Contains(full, "PAGE_COMPRESSED") || len(res.Translations) != 1 {
		t.Fatalf("%s %+v", full, res)
	}
	if _, res := toMySQL.Table("t", "CREATE TABLE `t` (\n  `a` int(11) NOT NULL\n) ENGINE=Aria DEFAULT CHARSET=utf8mb4"); len(res.Refusals) != 1 {
		t.Fatalf("Aria: %+v", res)
	}
	full, res = toMariaDB.Table("t", "CREATE TABLE `t` (\n  `a` int NOT NULL\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 /*!80016 DEFAULT ENCRYPTION='N' */")
	if strings.Contains(full, "ENCRYPTION") || len(res.Translations) != 1 {
		t.Fatalf("%s %+v", full, res)
	}
}

func TestLongUniqueAndFunctionalIndexesAreRefused(t *testing.T) {
	if _, _, rf := one(t, toMySQL, "`b` blob DEFAULT NULL", "UNIQUE KEY `b` (`b`) USING HASH"); len(rf) != 1 || !strings.Contains(rf[0], "index `b`") {
		t.Fatalf("long unique: %v", rf)
	}
	if _, _, rf := one(t, toMariaDB, "`s` varchar(10) DEFAULT NULL", "KEY `functional_index` ((upper(`s`)))"); len(rf) != 1 || !strings.Contains(rf[0], "index `functional_index`") {
		t.Fatalf("functional index: %v", rf)
	}
}

func TestNotEnforcedChecksAndSRIDs(t *testing.T) {
	out, tr, rf := one(t, toMariaDB, "`id` int NOT NULL", "`p` point NOT NULL /*!80003 SRID 0 */", "PRIMARY KEY (`id`)", "CONSTRAINT `c1` CHECK ((`id` > 0)) /*!80016 NOT ENFORCED */")
	want := "  `id` int NOT NULL,\n  `p` point NOT NULL,\n  PRIMARY KEY (`id`)"
	if out != want || len(tr) != 2 || rf != nil {
		t.Fatalf("got\n%s\nwant\n%s\n%v %v", out, want, tr, rf)
	}
	// An enforced check is kept as it is.
	if out, tr, _ := one(t, toMariaDB, "CONSTRAINT `c2` CHECK ((`id` > 0))"); out != "  CONSTRAINT `c2` CHECK ((`id` > 0))" || tr != nil {
		t.Fatalf("%s %v", out, tr)
	}
}

func TestVectorRefused(t *testing.T) {
	if _, _, rf := one(t, toMariaDB, "`v` vector(3) DEFAULT NULL"); len(rf) != 1 {
		t.Fatalf("%v", rf)
	}
}

func TestObjectSQLModes(t *testing.T) {
	o := objdef.Object{Kind: objdef.Procedure, Name: "p", Create: "CREATE DEFINER=`root`@`localhost` PROCEDURE `p`() SELECT 1",
		SQLMode: "STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_AUTO_CREATE_USER,NO_ENGINE_SUBSTITUTION", Collation: "utf8mb4_uca1400_ai_ci"}
	got, res := toMySQL.Object(o)
	if got.SQLMode != "STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION" || got.Collation != "utf8mb4_0900_ai_ci" || len(res.Translations) != 2 || res.Err() != nil {
		t.Fatalf("%+v %+v", got, res)
	}
	o.SQLMode = "EMPTY_STRING_IS_NULL"
	if _, res := toMySQL.Object(o); res.Err() == nil || !strings.Contains(res.Err().Error(), "procedure p") {
		t.Fatalf("EMPTY_STRING_IS_NULL: %+v", res)
	}
	o.SQLMode = "TIME_TRUNCATE_FRACTIONAL,STRICT_ALL_TABLES"
	if got, _ := toMariaDB.Object(o); got.SQLMode != "STRICT_ALL_TABLES" {
		t.Fatalf("%+v", got)
	}
}

func TestObjectBodies(t *testing.T) {
	seq := objdef.Object{Kind: objdef.Trigger, Name: "tr", Table: "t", Create: "CREATE DEFINER=`root`@`localhost` TRIGGER tr BEFORE INSERT ON t FOR EACH ROW SET NEW.id = NEXTVAL(s)"}
	if _, res := toMySQL.Object(seq); res.Err() == nil || !strings.Contains(res.Err().Error(), "trigger tr on t") {
		t.Fatalf("sequence in a trigger: %+v", res)
	}
	view := objdef.Object{Kind: objdef.View, Name: "v", Create: "CREATE ALGORITHM=UNDEFINED DEFINER=`root`@`localhost` SQL SECURITY DEFINER VIEW `v` AS select `t`.`j` ->> '$.a' AS `a` from `t`"}
	if _, res := toMariaDB.Object(view); res.Err() == nil {
		t.Fatal("a view with ->> was accepted for MariaDB")
	}
	view.Create = "CREATE ALGORITHM=UNDEFINED DEFINER=`root`@`localhost` SQL SECURITY DEFINER VIEW `v` AS select `t`.`s` AS `s` from `t` where (`t`.`s` = _utf8mb4'x' COLLATE utf8mb4_0900_ai_ci)"
	got, res := toMariaDB.Object(view)
	if !strings.Contains(got.Create, "COLLATE utf8mb4_uca1400_nopad_ai_ci") || res.Err() != nil {
		t.Fatalf("%s %+v", got.Create, res)
	}
	ev := objdef.Object{Kind: objdef.Event, Name: "e", Create: "CREATE DEFINER=`root`@`localhost` EVENT `e` ON SCHEDULE EVERY 1 HOUR ON COMPLETION PRESERVE DISABLE ON REPLICA DO DELETE FROM t"}
	if got, _ := toMariaDB.Object(ev); !strings.Contains(got.Create, "DISABLE ON SLAVE") {
		t.Fatalf("%s", got.Create)
	}
}

func TestMariaDBJSONBecomesMySQLJSON(t *testing.T) {
	out, tr, rf := one(t, toMySQL, "`doc` longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL CHECK (json_valid(`doc`))",
		"`req` longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL CHECK (json_valid(`req`))",
		"`other` longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL CHECK (json_valid(`doc`))")
	want := "  `doc` json DEFAULT NULL,\n  `req` json NOT NULL,\n  `other` longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL CHECK (json_valid(`doc`))"
	if out != want || len(tr) != 2 || rf != nil {
		t.Fatalf("got\n%s\nwant\n%s\n%v %v", out, want, tr, rf)
	}
}

// TestOlderMariaDB: a move back from MariaDB 11.8 to 10.11 translates
// nothing (10.11 has the uca1400 collations, UUID, INET4 and INET6), and
// refuses by name what 10.11 lacks: VECTOR columns and indexes, a collation
// it does not list, bodies calling 11.7's functions. A target of 11.7 or
// later (Vector) takes VECTOR.
func TestOlderMariaDB(t *testing.T) {
	older := Rules{Dir: Older, Target: "mariadb 10.11.19", Collations: map[string]bool{"utf8mb4_general_ci": true, "utf8mb4_uca1400_ai_ci": true}}
	in := []string{"`id` int(11) NOT NULL", "`u` uuid DEFAULT NULL", "`a` inet6 DEFAULT NULL", "`s` varchar(10) COLLATE utf8mb4_uca1400_ai_ci DEFAULT NULL", "PRIMARY KEY (`id`)"}
	out, tr, rf := one(t, older, in...)
	if !strings.Contains(out, "`u` uuid DEFAULT NULL") || len(tr) != 0 || len(rf) != 0 {
		t.Fatalf("10.11 types and collations: %s %v %v", out, tr, rf)
	}
	_, _, rf = one(t, older, "`id` int(11) NOT NULL", "`v` vector(3) NOT NULL", "`s` varchar(10) COLLATE utf8mb4_uca1400_persian_ai_ci", "PRIMARY KEY (`id`)", "VECTOR KEY `vi` (`v`)")
	if len(rf) != 3 || !strings.Contains(rf[0], "column `v`: mariadb 10.11.19 has no VECTOR type") || !strings.Contains(rf[1], "utf8mb4_uca1400_persian_ai_ci") || !strings.Contains(rf[2], "index `vi`") {
		t.Fatalf("VECTOR and an unknown collation: %v", rf)
	}
	if _, _, rf := one(t, Rules{Dir: Older, Vector: true}, "`v` vector(3) NOT NULL", "VECTOR KEY `vi` (`v`)"); len(rf) != 0 {
		t.Fatalf("a target with VECTOR: %v", rf)
	}
	if _, _, rf := one(t, toMySQL, "`v` vector(3) NOT NULL", "VECTOR KEY `vi` (`v`)"); len(rf) != 2 {
		t.Fatalf("VECTOR to MySQL: %v", rf)
	}
	older.Collations["utf8mb4_uca1400_german2_nopad_ai_ci"] = true
	out, tr, rf = one(t, older, "`s` varchar(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_de_pb_0900_ai_ci DEFAULT NULL", "`g` varchar(10) COLLATE utf8mb4_general1400_as_ci")
	if !strings.Contains(out, "COLLATE utf8mb4_uca1400_german2_nopad_ai_ci") || len(tr) != 1 || len(rf) != 1 || !strings.Contains(rf[0], "utf8mb4_general1400_as_ci") {
		t.Fatalf("11.8's 0900 aliases and general1400: %s %v %v", out, tr, rf)
	}
	f := objdef.Object{Kind: objdef.Function, Name: "d", Create: "CREATE DEFINER=`root`@`localhost` FUNCTION `d`(a vector(3)) RETURNS double RETURN VEC_DISTANCE_EUCLIDEAN(a, a)"}
	if _, res := older.Object(f); res.Err() == nil || !strings.Contains(res.Err().Error(), "function d") {
		t.Fatalf("VEC_DISTANCE in a function: %+v", res)
	}
}
