// Package xflavor translates table definitions and schema objects between
// MariaDB and Oracle MySQL for a move whose target runs the other flavor.
// Each rule turns a definition into an equivalent the target accepts, or
// refuses it naming the table, column or object and what to change on the
// source. It is pure logic on SHOW CREATE text: no database, so each rule
// has its unit test and planning and create apply the same rules.
package xflavor

import (
	"fmt"
	"regexp"
	"strings"
)

// Direction is which way definitions go.
type Direction int

const (
	Same      Direction = iota // same flavor: nothing is translated
	ToMySQL                    // from MariaDB to MySQL
	ToMariaDB                  // from MySQL to MariaDB
	// Older is from MariaDB to an older MariaDB (a move back after an
	// upgrade, 11.8 to 10.11): nothing is translated, but what the target
	// lacks (its collations, VECTOR) is refused by name at planning.
	Older
)

// Between is the direction from a server to another (mysql: Oracle MySQL),
// as far as flavors tell it (snapshot.Rules tells Older from the versions).
func Between(srcMySQL, dstMySQL bool) Direction {
	switch {
	case srcMySQL == dstMySQL:
		return Same
	case dstMySQL:
		return ToMySQL
	}
	return ToMariaDB
}

func (d Direction) target() string {
	if d == ToMySQL {
		return "MySQL"
	}
	return "MariaDB"
}

// targetName is the target as refusals name it.
func (x Rules) targetName() string {
	if x.Target != "" {
		return x.Target
	}
	return x.Dir.target()
}

// Translation is one change a definition gets on its way to the target.
type Translation struct {
	Object string `json:"object"`           // "table t", "trigger x on t", "schema s"
	Column string `json:"column,omitempty"` // the column or index, where the change is one
	From   string `json:"from"`
	To     string `json:"to"` // "" when dropped
	Why    string `json:"why"`
}

func (t Translation) String() string {
	where := t.Object
	if t.Column != "" {
		where += " " + t.Column
	}
	to := t.To
	if to == "" {
		to = "(dropped)"
	}
	return fmt.Sprintf("%s: %s -> %s (%s)", where, t.From, to, t.Why)
}

// Refusal is a definition the target cannot take as it is.
type Refusal struct {
	Object string `json:"object"`
	Column string `json:"column,omitempty"`
	What   string `json:"what"`   // what the target lacks
	Change string `json:"change"` // what to change on the source
}

func (r Refusal) String() string {
	where := r.Object
	if r.Column != "" {
		where += " " + r.Column
	}
	return fmt.Sprintf("%s: %s; %s", where, r.What, r.Change)
}

// Rules translate towards one target. Collations, when set, are the
// collation names the target has: a translated name it lacks is refused
// rather than left for CREATE TABLE to fail on.
type Rules struct {
	Dir        Direction
	Collations map[string]bool
	// Target names the target's version in refusals ("MariaDB 10.11.19").
	Target string
	// Vector: the target has VECTOR columns (MariaDB 11.7+); read for Older.
	Vector bool
}

// Result gathers what translating a set of definitions did.
type Result struct {
	Translations []Translation `json:"translations,omitempty"`
	Refusals     []Refusal     `json:"refusals,omitempty"`
}

// Add appends what o did.
func (r *Result) Add(o Result) {
	r.Translations = append(r.Translations, o.Translations...)
	r.Refusals = append(r.Refusals, o.Refusals...)
}

func (r *Result) change(object, column, from, to, why string) {
	r.Translations = append(r.Translations, Translation{Object: object, Column: column, From: from, To: to, Why: why})
}

func (r *Result) refuse(object, column, what, change string) {
	r.Refusals = append(r.Refusals, Refusal{Object: object, Column: column, What: what, Change: change})
}

// Err is nil when nothing was refused, else one error naming every refusal.
func (r Result) Err() error {
	if len(r.Refusals) == 0 {
		return nil
	}
	lines := make([]string, len(r.Refusals))
	for i, f := range r.Refusals {
		lines[i] = f.String()
	}
	return fmt.Errorf("the target runs the other flavor or an older version and cannot take these definitions as they are (docs/servers.md, 'Moving between MariaDB and MySQL', 'Moving between MariaDB versions'): %s", strings.Join(lines, "; "))
}

// mariaLangs are MariaDB's uca1400 tailorings and MySQL's 0900 locales.
var mariaLangs = map[string]string{
	"icelandic": "is", "latvian": "lv", "romanian": "ro", "slovenian": "sl", "polish": "pl",
	"estonian": "et", "spanish": "es", "swedish": "sv", "turkish": "tr", "czech": "cs",
	"danish": "da", "lithuanian": "lt", "slovak": "sk", "spanish2": "es_trad", "roman": "la",
	"esperanto": "eo", "hungarian": "hu", "german2": "de_pb", "croatian": "hr", "vietnamese": "vi",
}

var mysqlLangs = func() map[string]string {
	m := map[string]string{}
	for k, v := range mariaLangs {
		m[v] = k
	}
	return m
}()

var (
	ucaRE  = regexp.MustCompile(`^(utf8mb4|utf8mb3)_uca1400(?:_([a-z0-9]+))?(_nopad)?_(ai|as)_(ci|cs)$`)
	o900RE = regexp.MustCompile(`^utf8mb4(?:_([a-z_]+?))?_0900_(ai_ci|as_ci|as_cs|bin)$`)
)

// Collation is the target's name for collation c, and why it differs (""
// when c is kept). ok is false when the target has no equivalent.
//
// MariaDB's uca1400 family (UCA 14.0) becomes MySQL's 0900 family (UCA 9.0):
// the same tailorings, accent and case sensitivity. 0900 collations are NO
// PAD, so a PAD SPACE uca1400 column compares trailing spaces on MySQL; no
// two values a unique key held apart on the source become equal. The other
// way, a 0900 collation becomes the uca1400 NO PAD collation, which keeps
// every value a MySQL unique key holds apart distinct too.
func (x Rules) Collation(c string) (to, why string, ok bool) {
	switch x.Dir {
	case ToMySQL:
		if m := ucaRE.FindStringSubmatch(c); m != nil {
			if m[1] != "utf8mb4" {
				return "", "", false
			}
			if m[2] == "nopad" { // the pattern takes NO PAD for a tailoring's name
				m[2], m[3] = "", "_nopad"
			}
			lang := ""
			if m[2] != "" {
				l, known := mariaLangs[m[2]]
				if !known {
					return "", "", false
				}
				lang = l + "_"
			}
			suffix := m[4] + "_" + m[5]
			to = "utf8mb4_" + lang + "0900_" + suffix
			why = "MySQL's UCA 9.0 collation with the same tailoring and sensitivity"
			if m[3] == "" {
				why += " (NO PAD: trailing spaces compare)"
			}
			return to, why, x.has(to)
		}
		switch c {
		case "utf8mb4_nopad_bin":
			return "utf8mb4_0900_bin", "code point order without padding, as on the source", x.has("utf8mb4_0900_bin")
		}
		if strings.Contains(c, "_nopad_") {
			return "", "", false
		}
	case Older:
		// MariaDB 11.4+ names MySQL's 0900 collations as aliases of its
		// uca1400 NO PAD ones (information_schema.COLLATIONS says "Alias
		// for …"); an older MariaDB knows them by the uca1400 name only.
		if !x.has(c) && o900RE.MatchString(c) {
			to, _, ok := Rules{Dir: ToMariaDB, Collations: x.Collations}.Collation(c)
			return to, "the uca1400 NO PAD collation MariaDB 11.4+ names " + c + " as an alias of", ok
		}
	case ToMariaDB:
		if m := o900RE.FindStringSubmatch(c); m != nil {
			if m[2] == "bin" {
				if m[1] != "" {
					return "", "", false
				}
				return "utf8mb4_nopad_bin", "code point order without padding, as on the source", x.has("utf8mb4_nopad_bin")
			}
			lang := ""
			if m[1] != "" {
				l, known := mysqlLangs[m[1]]
				if !known {
					return "", "", false
				}
				lang = l + "_"
			}
			to = "utf8mb4_uca1400_" + lang + "nopad_" + m[2]
			return to, "MariaDB's UCA 14.0 collation with the same tailoring and sensitivity, NO PAD as on the source", x.has(to)
		}
	}
	return c, "", x.has(c)
}

func (x Rules) has(c string) bool { return x.Collations == nil || x.Collations[c] }

// collation rewrites one collation name in place, recording the change.
func (x Rules) collation(res *Result, object, column, c string) string {
	to, why, ok := x.Collation(c)
	if !ok {
		res.refuse(object, column, fmt.Sprintf("%s has no collation %s nor an equivalent of it", x.targetName(), c),
			"change it on the source to a collation both flavors have (utf8mb4_bin, utf8mb4_general_ci, utf8mb4_unicode_ci) before the move")
		return c
	}
	if to != c {
		res.change(object, column, "COLLATE "+c, "COLLATE "+to, why)
	}
	return to
}

var collateRE = regexp.MustCompile(`\bCOLLATE([ =])([A-Za-z0-9_]+)`)

// collations rewrites every COLLATE name in s.
func (x Rules) collations(res *Result, object, column, s string) string {
	return collateRE.ReplaceAllStringFunc(s, func(m string) string {
		g := collateRE.FindStringSubmatch(m)
		return "COLLATE" + g[1] + x.collation(res, object, column, g[2])
	})
}
