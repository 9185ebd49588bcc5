package schemaobj

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/sqltok"
	"github.com/shardctl/shardctl/schemaobj/objdef"
)

// The object and its kinds are defined in objdef (no database).
type Object = objdef.Object

const (
	Function  = objdef.Function
	Procedure = objdef.Procedure
	View      = objdef.View
	Trigger   = objdef.Trigger
	Event     = objdef.Event
)

func unguard(def string) string { return objdef.Unguard(def) }

var kindOrder = map[string]int{Function: 0, Procedure: 1, View: 2, Trigger: 3, Event: 4}

// Read returns the views, triggers, functions, procedures and events of
// schema in creation order (triggers of a table in their firing order).
// Triggers named skipPrefix (shardctl's fence) are left out.
func Read(ctx context.Context, db *sql.DB, schema, skipPrefix string) ([]Object, error) {
	type ref struct{ kind, name, table, extra string }
	var refs []ref
	list := func(q string, kind string) error {
		rows, err := db.QueryContext(ctx, q, schema)
		if err != nil {
			return fmt.Errorf("list %ss of %s: %w", strings.ToLower(kind), schema, err)
		}
		defer rows.Close()
		for rows.Next() {
			var r ref
			if err := rows.Scan(&r.kind, &r.name, &r.table, &r.extra); err != nil {
				return err
			}
			if r.kind == Trigger && skipPrefix != "" && strings.HasPrefix(r.name, skipPrefix) {
				continue
			}
			refs = append(refs, r)
		}
		return rows.Err()
	}
	for _, q := range []struct{ q, kind string }{
		{`SELECT ROUTINE_TYPE, ROUTINE_NAME, '', '' FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = ? ORDER BY ROUTINE_TYPE, ROUTINE_NAME`, "routine"},
		{`SELECT 'VIEW', TABLE_NAME, '', '' FROM information_schema.VIEWS WHERE TABLE_SCHEMA = ? ORDER BY TABLE_NAME`, View},
		{`SELECT 'TRIGGER', TRIGGER_NAME, EVENT_OBJECT_TABLE, '' FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = ?
			ORDER BY EVENT_OBJECT_TABLE, ACTION_TIMING, EVENT_MANIPULATION, ACTION_ORDER`, Trigger},
		{`SELECT 'EVENT', EVENT_NAME, '', STATUS FROM information_schema.EVENTS WHERE EVENT_SCHEMA = ? ORDER BY EVENT_NAME`, Event},
	} {
		if err := list(q.q, q.kind); err != nil {
			return nil, err
		}
	}
	var out []Object
	for _, r := range refs {
		o := Object{Kind: r.kind, Name: r.name, Table: r.table, Enabled: r.extra == "ENABLED"}
		m, err := showCreate(ctx, db, "SHOW CREATE "+r.kind+" "+dbutil.Table(schema, r.name))
		if err != nil {
			return nil, fmt.Errorf("read %s of %s: %w", o, schema, err)
		}
		for _, k := range []string{"Create View", "SQL Original Statement", "Create Function", "Create Procedure", "Create Event"} {
			if v, ok := m[k]; ok {
				o.Create = v
			}
		}
		if o.Create == "" {
			return nil, fmt.Errorf("read %s of %s: SHOW CREATE returned no definition (the account may lack the privilege to see it: grant SELECT on mysql.proc / SHOW_ROUTINE)", o, schema)
		}
		if o.Kind == Trigger {
			// A trigger shardctl left guarded (a crash, an interrupted prune)
			// reads as its original: guarding it again never wraps it twice.
			o.Create = unguard(o.Create)
		}
		o.SQLMode, o.Charset, o.Collation, o.TimeZone = m["sql_mode"], m["character_set_client"], m["collation_connection"], m["time_zone"]
		o.Definer = definerOf(o.Create)
		out = append(out, o)
	}
	// Stable by kind, keeping each kind's order from information_schema.
	sorted := make([]Object, 0, len(out))
	for k := 0; k < len(kindOrder); k++ {
		for _, o := range out {
			if kindOrder[o.Kind] == k {
				sorted = append(sorted, o)
			}
		}
	}
	return sorted, nil
}

// showCreate runs a SHOW CREATE statement and returns its one row by column name.
func showCreate(ctx context.Context, db *sql.DB, q string) (map[string]string, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%s returned no row", q)
	}
	vals, ptrs := dbutil.Dest[sql.NullString](len(cols))
	if err := rows.Scan(ptrs...); err != nil {
		return nil, err
	}
	m := map[string]string{}
	for i, c := range cols {
		m[c] = vals[i].String
	}
	return m, rows.Err()
}

var definerRE = regexp.MustCompile("(?i)\\bDEFINER\\s*=\\s*(`(?:[^`]|``)*`@`(?:[^`]|``)*`|'[^']*'@'[^']*'|[^ ]+@[^ ]+)")

func definerOf(create string) string {
	m := definerRE.FindStringSubmatch(create)
	if m == nil {
		return ""
	}
	return m[1]
}

// Rename rewrites the schema name from to to where it qualifies an object
// (`from`.x, from.x or, read as ANSI_QUOTES, "from".x), outside string
// literals and comments (sqltok.Requalify); a name that merely contains it
// (from_10, a string 'from.x') or is qualified itself (x.from.y) is left
// alone.
func Rename(def, from, to string) string {
	if from == to {
		return def
	}
	return sqltok.Requalify(def, from, dbutil.QuoteIdent(to))
}
