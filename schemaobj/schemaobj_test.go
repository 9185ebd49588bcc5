package schemaobj

import (
	"strings"
	"testing"
)

func TestRenameOnlyQualifiers(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"select `shard_1`.`t`.`a` AS `a` from `shard_1`.`t`", "select `shard_9`.`t`.`a` AS `a` from `shard_9`.`t`"},
		{"SELECT shard_1.t.a FROM shard_1.t", "SELECT `shard_9`.t.a FROM `shard_9`.t"},
		{"SELECT 'shard_1.t', \"shard_1.x\" FROM shard_10.t, `shard_1` -- shard_1.t\n", "SELECT 'shard_1.t', \"shard_1.x\" FROM shard_10.t, `shard_1` -- shard_1.t\n"},
		{"SELECT x.shard_1.y /* shard_1.t */ FROM t", "SELECT x.shard_1.y /* shard_1.t */ FROM t"},
		{"SELECT 'it''s shard_1.t' , shard_1.f()", "SELECT 'it''s shard_1.t' , `shard_9`.f()"},
		// double quotes read as ANSI_QUOTES names (sqltok); a backslash escapes in strings
		{"SELECT \"shard_1\".t, 'a\\'shard_1.t' FROM x.`shard_1`.y", "SELECT `shard_9`.t, 'a\\'shard_1.t' FROM x.`shard_1`.y"},
		{"/*!50001 SELECT shard_1.t */ # shard_1.t", "/*!50001 SELECT `shard_9`.t */ # shard_1.t"},
	} {
		if got := Rename(c.in, "shard_1", "shard_9"); got != c.want {
			t.Errorf("Rename(%q)\n got %q\nwant %q", c.in, got, c.want)
		}
	}
}

func TestTriggerForms(t *testing.T) {
	o := Object{Kind: Trigger, Name: "b", Table: "t", Create: "CREATE DEFINER=`root`@`localhost` TRIGGER `b` BEFORE INSERT ON `t` FOR EACH ROW FOLLOWS `a` SET NEW.d = NOW();"}
	if got, want := o.Exact(), "CREATE DEFINER=`root`@`localhost` TRIGGER `b` BEFORE INSERT ON `t` FOR EACH ROW SET NEW.d = NOW();"; got != want {
		t.Errorf("Exact: %q", got)
	}
	g, err := o.Guarded()
	if want := "CREATE DEFINER=`root`@`localhost` TRIGGER `b` BEFORE INSERT ON `t` FOR EACH ROW IF @shardctl_skip_triggers IS NULL THEN SET NEW.d = NOW(); END IF"; err != nil || g != want {
		t.Errorf("Guarded: %q %v", g, err)
	}
	if back := unguard(g); back != strings.TrimSuffix(o.Exact(), ";") {
		t.Errorf("unguard: %q", back)
	}
	if same := unguard(o.Create); same != o.Create {
		t.Errorf("unguard of an unguarded trigger: %q", same)
	}
	if o.Definer != "" || definerOf(o.Create) != "`root`@`localhost`" {
		t.Errorf("definer %q", definerOf(o.Create))
	}
	e := Object{Kind: Event, Create: "CREATE DEFINER=`u`@`%` EVENT `e` ON SCHEDULE EVERY 1 HOUR STARTS '2020-01-01 00:00:00' ON COMPLETION NOT PRESERVE ENABLE DO DELETE FROM t"}
	if got := e.Disabled(); got != "CREATE DEFINER=`u`@`%` EVENT `e` ON SCHEDULE EVERY 1 HOUR STARTS '2020-01-01 00:00:00' ON COMPLETION NOT PRESERVE DISABLE DO DELETE FROM t" {
		t.Errorf("Disabled: %q", got)
	}
}

func TestSplitDefiner(t *testing.T) {
	for in, want := range map[string][2]string{"`root`@`localhost`": {"root", "localhost"}, "'a''b'@'%'": {"a'b", "%"}, "`x``y`@`10.0.%`": {"x`y", "10.0.%"}} {
		u, h, ok := splitDefiner(in)
		if !ok || u != want[0] || h != want[1] {
			t.Errorf("splitDefiner(%s) = %q %q %v", in, u, h, ok)
		}
	}
	if _, _, ok := splitDefiner("CURRENT_USER"); ok {
		t.Error("CURRENT_USER parsed")
	}
}
