package xflavor

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/shardctl/shardctl/schemaobj/objdef"
)

// sql_mode words: those one flavor has and the other lacks. Dropped: they
// change only what SHOW CREATE prints or what CREATE USER does, or name the
// target's behaviour anyway. Refused: they change what a body computes.
var (
	dropModes = map[Direction]map[string]string{
		ToMySQL: {
			"NO_AUTO_CREATE_USER": "MySQL 8.0 removed it (GRANT no longer creates accounts)",
			"NO_FIELD_OPTIONS":    "it changes only what SHOW CREATE prints; MySQL 8.0 removed it",
			"NO_KEY_OPTIONS":      "it changes only what SHOW CREATE prints; MySQL 8.0 removed it",
			"NO_TABLE_OPTIONS":    "it changes only what SHOW CREATE prints; MySQL 8.0 removed it",
		},
		ToMariaDB: {
			"TIME_TRUNCATE_FRACTIONAL": "MariaDB truncates fractional seconds unless TIME_ROUND_FRACTIONAL is set",
		},
	}
	refuseModes = map[Direction]map[string]bool{
		ToMySQL: {"EMPTY_STRING_IS_NULL": true, "SIMULTANEOUS_ASSIGNMENT": true, "TIME_ROUND_FRACTIONAL": true, "ORACLE": true,
			"MSSQL": true, "DB2": true, "POSTGRESQL": true, "MAXDB": true, "MYSQL323": true, "MYSQL40": true},
	}
)

// Body syntax one flavor has and the other lacks, found by its words: a
// definition that uses it is refused by name at planning rather than failing
// at create.
var bodySyntax = map[Direction][]struct {
	re   *regexp.Regexp
	what string
}{
	ToMySQL: {
		{regexp.MustCompile(`(?i)\bNEXT\s+VALUE\s+FOR\b|\b(NEXTVAL|LASTVAL|SETVAL)\s*\(`), "MariaDB sequences"},
		{regexp.MustCompile(`(?i)\bRETURNING\b`), "MariaDB's RETURNING clause"},
		{regexp.MustCompile(`(?i)%TYPE\b|\bROW\s+TYPE\s+OF\b`), "MariaDB's anchored data types"},
		{regexp.MustCompile(`(?i)\bFOR\s+\w+\s+IN\b`), "MariaDB's FOR loops"},
		{regexp.MustCompile(`(?i)\bFOR\s+SYSTEM_TIME\b`), "system-versioned queries"},
	},
	Older: {
		{regexp.MustCompile(`(?i)\b(VEC_\w+|UUID_V[47])\s*\(`), "functions MariaDB 11.7 added (VEC_…, UUID_v4, UUID_v7)"},
	},
	ToMariaDB: {
		{regexp.MustCompile(`->>?`), "MySQL's JSON path operators (-> and ->>; JSON_EXTRACT and JSON_UNQUOTE are on both)"},
		{regexp.MustCompile(`(?i)\bLATERAL\b`), "MySQL's LATERAL derived tables"},
		{regexp.MustCompile(`(?i)\bVALUES\s+ROW\s*\(`), "MySQL's VALUES ROW(…) table value constructor"},
	},
}

var disableOnRE = regexp.MustCompile(`(?i)\bDISABLE\s+ON\s+(REPLICA|SLAVE)\b`)

// Object translates a view, trigger, routine or event for the target: its
// session settings (sql_mode, collation), the collations its text names and
// the syntax one flavor spells otherwise; syntax the target lacks is refused
// by the object's name.
func (x Rules) Object(o objdef.Object) (objdef.Object, Result) {
	var res Result
	if x.Dir == Same {
		return o, res
	}
	name := o.String()
	var modes []string
	for _, m := range strings.Split(o.SQLMode, ",") {
		m = strings.TrimSpace(m)
		if m == "" {
			continue
		}
		if why, ok := dropModes[x.Dir][m]; ok {
			res.change(name, "", "sql_mode "+m, "", why)
			continue
		}
		if refuseModes[x.Dir][m] {
			res.refuse(name, "", fmt.Sprintf("it was created under sql_mode %s, which %s does not have", m, x.Dir.target()),
				"re-create it on the source without that mode (its body may compute otherwise)")
		}
		modes = append(modes, m)
	}
	o.SQLMode = strings.Join(modes, ",")
	if o.Collation != "" {
		o.Collation = x.collation(&res, name, "collation_connection", o.Collation)
	}
	for _, b := range bodySyntax[x.Dir] {
		if x.Dir == Older && x.Vector { // the target has 11.7's functions
			break
		}
		if b.re.MatchString(o.Create) {
			res.refuse(name, "", fmt.Sprintf("its definition uses %s, which %s does not have", b.what, x.targetName()),
				"rewrite it on the source in syntax both flavors take, or drop it before the move and re-create it after")
		}
	}
	if o.Kind == objdef.Event && x.Dir != Older {
		want := "SLAVE"
		if x.Dir == ToMySQL {
			want = "REPLICA"
		}
		o.Create = disableOnRE.ReplaceAllStringFunc(o.Create, func(s string) string {
			to := "DISABLE ON " + want
			if strings.EqualFold(s, to) {
				return s
			}
			res.change(name, "", s, to, x.Dir.target()+"'s spelling")
			return to
		})
	}
	o.Create = x.collations(&res, name, "", o.Create)
	return o, res
}
