package xflavor

import (
	"fmt"
	"regexp"
	"strings"
)

// Schema translates a schema's default collation.
func (x Rules) Schema(name, collation string) (string, Result) {
	var res Result
	if x.Dir == Same {
		return collation, res
	}
	return x.collation(&res, "schema "+name, "", collation), res
}

// Table translates SHOW CREATE TABLE's text of table name for the target.
// A definition in a layout it does not know is refused, never guessed at.
func (x Rules) Table(name, ddl string) (string, Result) {
	var res Result
	if x.Dir == Same {
		return ddl, res
	}
	object := "table " + name
	if strings.HasPrefix(ddl, "CREATE SEQUENCE") {
		res.refuse(object, "", "it is a MariaDB sequence, which MySQL does not have",
			"replace it by an AUTO_INCREMENT column, or move the shard to a MariaDB server")
		return ddl, res
	}
	lines := strings.Split(ddl, "\n")
	// The options line is the first that starts with ")"; a partitioning
	// clause may follow it on lines of its own, kept as they are.
	end := -1
	for i, l := range lines {
		if strings.HasPrefix(l, ")") {
			end = i
			break
		}
	}
	if end < 2 || !strings.HasPrefix(lines[0], "CREATE TABLE ") {
		res.refuse(object, "", "its definition is not laid out as SHOW CREATE TABLE lays one out", "report it with the definition")
		return ddl, res
	}
	var out []string
	out = append(out, lines[0])
	for _, l := range lines[1:end] {
		comma := strings.HasSuffix(l, ",")
		e := strings.TrimSuffix(l, ",")
		s := strings.TrimSpace(e)
		var kept string
		if strings.HasPrefix(s, "`") {
			kept = x.column(&res, object, s)
		} else {
			kept = x.element(&res, object, s)
		}
		if kept == "" {
			continue
		}
		if comma {
			kept += ","
		}
		out = append(out, "  "+kept)
	}
	// A dropped last element leaves a trailing comma.
	if n := len(out) - 1; n > 0 {
		out[n] = strings.TrimSuffix(out[n], ",")
	}
	out = append(out, x.options(&res, object, lines[end]))
	out = append(out, lines[end+1:]...)
	return strings.Join(out, "\n"), res
}

var (
	identRE = regexp.MustCompile("^`((?:[^`]|``)*)`")
	// MySQL's versioned comments from 5.7 on (/*!80023 INVISIBLE */), which
	// MariaDB skips; older ones (/*!50100 PARTITION BY …) both execute.
	versionedRE   = regexp.MustCompile(`/\*!((?:5[7-9]|[6-9]\d)\d{3}) ?(.*?) ?\*/`)
	mariaOnlyRE   = regexp.MustCompile(`/\*M!(\d{5,6}) ?(.*?) ?\*/`)
	defaultCallRE = regexp.MustCompile(`\bDEFAULT ([a-z_][a-z0-9_]*)\(`)
)

// Functions a column default may call without parentheses on both flavors.
var plainDefaults = map[string]bool{"current_timestamp": true, "now": true, "localtime": true, "localtimestamp": true}

// column translates one column definition (s starts with its quoted name).
func (x Rules) column(res *Result, object, s string) string {
	m := identRE.FindStringSubmatch(s)
	if m == nil {
		res.refuse(object, "", fmt.Sprintf("column definition %q not understood", s), "report it with the definition")
		return s
	}
	col := "column " + m[0]
	rest := strings.TrimSpace(s[len(m[0]):])
	typ := ""
	if f := strings.FieldsFunc(rest, func(r rune) bool { return r == ' ' || r == '(' }); len(f) > 0 {
		typ = strings.ToLower(f[0])
	}
	upper := strings.ToUpper(rest)
	switch x.Dir {
	case Older:
		if typ == "vector" && !x.Vector {
			res.refuse(object, col, x.targetName()+" has no VECTOR type (MariaDB 11.7 added it)",
				"keep the shard on a MariaDB 11.7 or later server, or change the column on the source to a VARBINARY (ALTER TABLE … MODIFY "+m[0]+" VARBINARY(…), dropping its VECTOR index first)")
			return s
		}
	case ToMySQL:
		switch typ {
		case "vector":
			res.refuse(object, col, "MariaDB's VECTOR type is not carried to MySQL's (different binlog forms, and MySQL has no vector index)",
				"move the shard to a MariaDB 11.7 or later server, or change the column on the source to a VARBINARY first")
			return s
		case "inet6", "inet4", "uuid":
			alt := map[string]string{"inet6": "VARCHAR(39)", "inet4": "VARCHAR(15)", "uuid": "CHAR(36)"}[typ]
			res.refuse(object, col, fmt.Sprintf("MySQL has no %s type (MariaDB stores it in a binary form the binlog carries as such)", strings.ToUpper(typ)),
				fmt.Sprintf("change the column on the source first (ALTER TABLE … MODIFY %s %s keeps its text form), or move the shard to a MariaDB server", m[0], alt))
			return s
		}
		if strings.Contains(upper, "ROW START") || strings.Contains(upper, "ROW END") || strings.Contains(upper, "WITHOUT SYSTEM VERSIONING") {
			res.refuse(object, col, "system versioning is MariaDB's; MySQL keeps no row history", "ALTER TABLE … DROP SYSTEM VERSIONING on the source (its history is lost), or move the shard to a MariaDB server")
			return s
		}
		rest = mariaOnlyRE.ReplaceAllStringFunc(rest, func(c string) string {
			g := mariaOnlyRE.FindStringSubmatch(c)
			if strings.EqualFold(g[2], "COMPRESSED") {
				res.change(object, col, "COMPRESSED", "", "MySQL has no column compression: the column is stored uncompressed (ROW_FORMAT=COMPRESSED or page compression compress the table)")
				return ""
			}
			res.refuse(object, col, fmt.Sprintf("MariaDB-only attribute %q", g[2]), "remove it on the source first")
			return c
		})
		// MySQL takes an expression default only in parentheses.
		rest = wrapDefaultCalls(res, object, col, rest)
		if j, ok := mariaJSON(m[0], rest); ok {
			res.change(object, col, "longtext … CHECK (json_valid(…))", "json", "MariaDB's JSON is this LONGTEXT; MySQL's JSON type keeps the document (in MySQL's spelling: verify compares documents)")
			return m[0] + " " + j
		}
	case ToMariaDB:
		switch typ {
		case "vector":
			res.refuse(object, col, "MySQL's VECTOR type is not carried to MariaDB (MariaDB 10.11 has none; 11.7's stores the same floats, but shardctl's binlog reader does not decode MySQL's vector values)",
				"change the column to a VARBINARY on the source first, or move the shard to a MySQL server")
			return s
		}
		rest = versionedRE.ReplaceAllStringFunc(rest, func(c string) string {
			g := versionedRE.FindStringSubmatch(c)
			word := strings.ToUpper(g[2])
			switch {
			case word == "INVISIBLE":
				res.change(object, col, c, "INVISIBLE", "MariaDB skips MySQL 8.0's versioned comments; its own INVISIBLE is the same attribute")
				return "INVISIBLE"
			case strings.HasPrefix(word, "SRID "):
				res.change(object, col, c, "", "MariaDB keeps no SRID constraint on a column; the values keep their SRID")
				return ""
			}
			res.refuse(object, col, fmt.Sprintf("MySQL attribute %q, which MariaDB would skip", g[2]), "remove it on the source first")
			return c
		})
	}
	rest = x.collations(res, object, col, rest)
	return strings.Join(strings.Fields(m[0]+" "+rest), " ")
}

// wrapDefaultCalls puts a function-call default (MariaDB's DEFAULT uuid())
// in the parentheses MySQL's expression defaults need.
func wrapDefaultCalls(res *Result, object, col, s string) string {
	for _, loc := range defaultCallRE.FindAllStringSubmatchIndex(s, -1) {
		fn := s[loc[2]:loc[3]]
		if plainDefaults[fn] {
			continue
		}
		start := loc[2]
		end := closingParen(s, loc[1]-1)
		if end < 0 {
			res.refuse(object, col, "a default expression whose parentheses do not balance", "report it with the definition")
			return s
		}
		expr := s[start : end+1]
		res.change(object, col, "DEFAULT "+expr, "DEFAULT ("+expr+")", "MySQL takes an expression default only in parentheses")
		return s[:start] + "(" + expr + ")" + wrapDefaultCalls(res, object, col, s[end+1:])
	}
	return s
}

// closingParen is the index of the parenthesis that closes the one at open,
// skipping quoted strings; -1 if none.
func closingParen(s string, open int) int {
	depth := 0
	var quote byte
	for i := open; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"' || c == '`':
			quote = c
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// element translates one index, key or constraint line ("" drops it).
func (x Rules) element(res *Result, object, s string) string {
	upper := strings.ToUpper(s)
	name := ""
	if i := strings.Index(s, "`"); i >= 0 {
		if m := identRE.FindString(s[i:]); m != "" {
			name = m
		}
	}
	if strings.HasPrefix(upper, "VECTOR KEY") || strings.HasPrefix(upper, "VECTOR INDEX") {
		if x.Dir == ToMySQL || x.Dir == Older && !x.Vector {
			res.refuse(object, "index "+name, x.targetName()+" has no vector index", "drop the index on the source first (ALTER TABLE … DROP INDEX "+name+"), or keep the shard on a MariaDB 11.7 or later server")
			return s
		}
	}
	switch x.Dir {
	case ToMySQL:
		switch {
		case strings.HasPrefix(upper, "PERIOD FOR"):
			res.refuse(object, name, "system versioning or application-time periods are MariaDB's", "drop the period (ALTER TABLE … DROP PERIOD FOR …) on the source, or move the shard to a MariaDB server")
			return s
		case strings.HasPrefix(upper, "UNIQUE KEY") && strings.Contains(upper, "USING HASH"):
			res.refuse(object, "index "+name, "a UNIQUE key over long columns (MariaDB's USING HASH), which MySQL cannot build", "make it a unique key over a prefix or a generated hash column on the source, or move the shard to a MariaDB server")
			return s
		}
	case ToMariaDB:
		if (strings.Contains(upper, "KEY ") || strings.HasPrefix(upper, "INDEX ")) && strings.Contains(s, "((") && !strings.HasPrefix(upper, "CONSTRAINT") {
			res.refuse(object, "index "+name, "a functional index (an index on an expression), which MariaDB does not have", "replace it on the source by a generated column and an index on that column, or move the shard to a MySQL server")
			return s
		}
		if strings.HasPrefix(upper, "CONSTRAINT") && strings.Contains(upper, "NOT ENFORCED") {
			res.change(object, "constraint "+name, s, "", "MariaDB enforces every CHECK and skips MySQL's NOT ENFORCED: a check MySQL did not enforce is left out, so the rows that break it still copy")
			return ""
		}
		if versionedRE.MatchString(s) {
			res.refuse(object, name, "a MySQL 8.0 versioned comment MariaDB would skip: "+versionedRE.FindString(s), "remove it on the source first")
			return s
		}
	}
	return x.collations(res, object, name, s)
}

var tableOptionRE = regexp.MustCompile("(?i)\\s`?(PAGE_COMPRESSED|PAGE_COMPRESSION_LEVEL|ENCRYPTED|ENCRYPTION_KEY_ID|IETF_QUOTES|TRANSACTIONAL|SEQUENCE)`?=('[^']*'|\\S+)")

// options translates the last line (table options).
func (x Rules) options(res *Result, object, l string) string {
	upper := strings.ToUpper(l)
	switch x.Dir {
	case ToMySQL:
		if strings.Contains(upper, "WITH SYSTEM VERSIONING") {
			res.refuse(object, "", "system versioning is MariaDB's; MySQL keeps no row history", "ALTER TABLE … DROP SYSTEM VERSIONING on the source (its history is lost), or move the shard to a MariaDB server")
		}
		for _, e := range []string{"ENGINE=Aria", "ENGINE=CONNECT", "ENGINE=S3", "ENGINE=SEQUENCE", "ENGINE=SPIDER", "ENGINE=ColumnStore"} {
			if strings.Contains(l, e) {
				res.refuse(object, "", fmt.Sprintf("MySQL has no %s engine", strings.TrimPrefix(e, "ENGINE=")), "ALTER TABLE … ENGINE=InnoDB on the source first")
			}
		}
		l = tableOptionRE.ReplaceAllStringFunc(l, func(o string) string {
			res.change(object, "", strings.TrimSpace(o), "", "a MariaDB table option MySQL does not have (compression and encryption are the target's own settings)")
			return ""
		})
	case ToMariaDB:
		l = versionedRE.ReplaceAllStringFunc(l, func(c string) string {
			res.change(object, "", c, "", "a MySQL 8.0 table option in a versioned comment, which MariaDB skips")
			return ""
		})
	}
	return x.collations(res, object, "", l)
}

var mariaJSONRE = regexp.MustCompile("^longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_bin( NOT NULL)?( DEFAULT NULL)?(.*?) CHECK \\(json_valid\\((`(?:[^`]|``)*`)\\)\\)(.*)$")

// mariaJSON recognizes a MariaDB JSON column (a LONGTEXT in utf8mb4_bin
// checked by json_valid of itself) and returns its MySQL definition.
func mariaJSON(name, rest string) (string, bool) {
	m := mariaJSONRE.FindStringSubmatch(rest)
	if m == nil || m[4] != name {
		return "", false
	}
	return strings.Join(strings.Fields("json"+m[1]+m[2]+m[3]+m[5]), " "), true
}
