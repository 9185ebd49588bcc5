// Package objdef holds a schema object (view, trigger, routine, event) as
// plans carry it, with the pure rewrites of its definition. It needs no
// database; package schemaobj re-exports it and reads and creates objects.
package objdef

import (
	"fmt"
	"regexp"
	"strings"
)

// SkipVar is the session variable shardctl's own sessions (copy, binlog
// apply, cleanup, abort) set so that guarded triggers do not fire on the rows
// they write: the source's binlog already carries whatever the application's
// triggers wrote.
const SkipVar = "@shardctl_skip_triggers"

// Kinds of object, in the order they are created (a view may call a
// function; a trigger or event may call a procedure or read a view).
const (
	Function  = "FUNCTION"
	Procedure = "PROCEDURE"
	View      = "VIEW"
	Trigger   = "TRIGGER"
	Event     = "EVENT"
)

// Object is one view, trigger, routine or event, as SHOW CREATE gives it:
// the statement with its DEFINER, and the session settings it was created
// under (sql_mode, character set, collation, time zone), which decide how
// its body is parsed and run.
type Object struct {
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Table     string `json:"table,omitempty"` // triggers: the table
	Create    string `json:"create"`
	SQLMode   string `json:"sql_mode,omitempty"`
	Charset   string `json:"character_set_client,omitempty"`
	Collation string `json:"collation_connection,omitempty"`
	TimeZone  string `json:"time_zone,omitempty"` // events
	Enabled   bool   `json:"enabled,omitempty"`   // events: ENABLED on the source
	Definer   string `json:"definer,omitempty"`
	OnTarget  bool   `json:"on_target,omitempty"` // a merge target has one of that name: left as it is
}

func (o Object) String() string {
	if o.Kind == Trigger {
		return fmt.Sprintf("trigger %s on %s", o.Name, o.Table)
	}
	return strings.ToLower(o.Kind) + " " + o.Name
}

// triggerRE splits a trigger definition at FOR EACH ROW, with the optional
// FOLLOWS/PRECEDES clause (dropped: triggers are created in firing order).
var triggerRE = regexp.MustCompile("(?is)^(.*?\\bFOR\\s+EACH\\s+ROW\\s+)((?:FOLLOWS|PRECEDES)\\s+(?:`(?:[^`]|``)*`|\\w+)\\s+)?(.*)$")

// Exact is the trigger's definition without a FOLLOWS/PRECEDES clause
// (creating triggers in their firing order keeps the order); other objects
// are returned as they are.
func (o Object) Exact() string {
	if o.Kind != Trigger {
		return o.Create
	}
	m := triggerRE.FindStringSubmatch(o.Create)
	if m == nil {
		return o.Create
	}
	return m[1] + m[3]
}

// Guarded is the trigger's definition with its body wrapped so that it does
// nothing in a session that set SkipVar: shardctl's copy, binlog apply and
// cleanup sessions. Application sessions see the trigger unchanged.
func (o Object) Guarded() (string, error) {
	m := triggerRE.FindStringSubmatch(o.Create)
	if m == nil {
		return "", fmt.Errorf("%s: cannot find FOR EACH ROW in its definition", o)
	}
	body := strings.TrimRight(strings.TrimSpace(m[3]), "; \t\r\n")
	return m[1] + guardHead + body + guardTail, nil
}

const (
	guardHead = "IF " + SkipVar + " IS NULL THEN "
	guardTail = "; END IF"
)

// Unguard returns a guarded trigger definition's original.
func Unguard(def string) string {
	m := triggerRE.FindStringSubmatch(def)
	if m == nil {
		return def
	}
	body := strings.TrimSpace(m[3])
	if !strings.HasPrefix(body, guardHead) || !strings.HasSuffix(body, guardTail) {
		return def
	}
	return m[1] + m[2] + strings.TrimSuffix(strings.TrimPrefix(body, guardHead), guardTail)
}

// Disabled is an event's definition created DISABLED, so it cannot run on a
// copy before cutover.
func (o Object) Disabled() string {
	return eventStatusRE.ReplaceAllString(o.Create, "${1}DISABLE")
}

var eventStatusRE = regexp.MustCompile(`(?is)(\bPRESERVE\s+)(ENABLE|DISABLE\s+ON\s+(?:SLAVE|REPLICA)|DISABLE)\b`)
