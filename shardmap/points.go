package shardmap

// Bulk registration of LIST points: the files 'shardmap import' reads and
// 'shardmap export' writes. Two forms: CSV lines "key,shard" (a header line
// "key,shard" and '#' comments allowed) and the JSON 'shardmap show -o json'
// writes (its LIST mappings). Parsing and classifying need no database.

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/shardctl/shardctl/keyspace"
)

// PointLine is one "key -> shard" of a points file and where it stood.
type PointLine struct {
	Line  int    `json:"line"`
	Key   string `json:"key"`
	Shard int    `json:"shard_id"`
	// Func is the function the JSON form names for it ("" in CSV).
	Func string `json:"-"`
}

func (p PointLine) String() string {
	return fmt.Sprintf("line %d (key %s -> shard %d)", p.Line, p.Key, p.Shard)
}

// ParsePoints reads a points file: the JSON of 'shardmap show -o json' when
// its first non-space byte is '{', CSV "key,shard" lines otherwise.
func ParsePoints(r io.Reader) ([]PointLine, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read the points file: %w", err)
	}
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) > 0 && t[0] == '{' {
		return parsePointsJSON(data)
	}
	return parsePointsCSV(data)
}

func parsePointsCSV(data []byte) ([]PointLine, error) {
	cr := csv.NewReader(bytes.NewReader(data))
	cr.Comment = '#'
	cr.FieldsPerRecord = -1 // the count is checked here, to name the line
	cr.ReuseRecord = true
	var out []PointLine
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return nil, badInput("line %d: %v", pe.StartLine, pe.Err)
			}
			return nil, badInput("%v", err)
		}
		line, _ := cr.FieldPos(0)
		if len(rec) != 2 {
			return nil, badInput("line %d: %d fields, want 2: key,shard", line, len(rec))
		}
		if len(out) == 0 && strings.EqualFold(strings.TrimSpace(rec[0]), "key") && strings.EqualFold(strings.TrimSpace(rec[1]), "shard") {
			continue // the header export writes
		}
		shard, err := strconv.Atoi(strings.TrimSpace(rec[1]))
		if err != nil || shard <= 0 {
			return nil, badInput("line %d: shard %q is not a shard id (a positive number; see 'shardctl shardmap show')", line, rec[1])
		}
		out = append(out, PointLine{Line: line, Key: rec[0], Shard: shard})
	}
}

// parsePointsJSON takes the LIST mappings of a shard map document, each
// named by the line its object starts on.
func parsePointsJSON(data []byte) ([]PointLine, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	bad := func(err error) error {
		return badInput("line %d: not the JSON 'shardmap show -o json' writes: %v", lineAt(data, dec.InputOffset()), err)
	}
	if _, err := dec.Token(); err != nil {
		return nil, bad(err)
	}
	type funcName struct {
		ID   int    `json:"func_id"`
		Name string `json:"name"`
	}
	var funcs []funcName
	var out []PointLine
	var ids []int // the func_id of each point, named once the functions are read
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, bad(err)
		}
		switch tok {
		case "functions":
			if err := dec.Decode(&funcs); err != nil {
				return nil, bad(err)
			}
		case "mappings":
			if t, err := dec.Token(); err != nil || t != json.Delim('[') {
				if t == nil && err == nil {
					continue // "mappings": null
				}
				return nil, bad(fmt.Errorf("mappings is not a list"))
			}
			for dec.More() {
				line := lineAt(data, dec.InputOffset())
				var mp Mapping
				if err := dec.Decode(&mp); err != nil {
					return nil, bad(err)
				}
				if mp.Kind != List {
					continue
				}
				if mp.Point == nil || mp.ShardID <= 0 {
					return nil, badInput("line %d: a LIST mapping needs a point and a shard_id", line)
				}
				out = append(out, PointLine{Line: line, Key: mp.Point.String(), Shard: mp.ShardID})
				ids = append(ids, mp.FuncID)
			}
			if _, err := dec.Token(); err != nil {
				return nil, bad(err)
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, bad(err)
			}
		}
	}
	for i, id := range ids {
		out[i].Func = fmt.Sprint(id)
		for _, f := range funcs {
			if f.ID == id {
				out[i].Func = f.Name
			}
		}
	}
	return out, nil
}

// lineAt is the line of the first token at or after offset off of data.
func lineAt(data []byte, off int64) int {
	i := int(off)
	for i < len(data) && strings.IndexByte(" \t\r\n,", data[i]) >= 0 {
		i++
	}
	return 1 + bytes.Count(data[:min(i, len(data))], []byte("\n"))
}

// Import is what a points file changes in function Function's LIST points.
type Import struct {
	Function  Function    `json:"function"`
	Added     []PointLine `json:"added"`
	Repointed []Repoint   `json:"repointed"`
	Unchanged int         `json:"unchanged"`
}

// Repoint is a point the file maps to another shard than the map does.
type Repoint struct {
	PointLine
	From   int    `json:"from_shard_id"`
	Status string `json:"-"` // the point's status where it is now
}

// Counts is the import in numbers, for people.
func (im *Import) Counts() string {
	return fmt.Sprintf("%d added, %d re-pointed, %d unchanged", len(im.Added), len(im.Repointed), im.Unchanged)
}

// Changes reports whether the import changes the map.
func (im *Import) Changes() bool { return len(im.Added)+len(im.Repointed) > 0 }

// Shards are the shards the import touches: every shard it maps keys to and
// every shard a re-pointed key leaves, each with the first line that
// touches it.
func (im *Import) Shards() map[int]PointLine {
	out := map[int]PointLine{}
	note := func(id int, p PointLine) {
		if q, ok := out[id]; !ok || p.Line < q.Line {
			out[id] = p
		}
	}
	for _, p := range im.Added {
		note(p.Shard, p)
	}
	for _, r := range im.Repointed {
		note(r.Shard, r.PointLine)
		note(r.From, r.PointLine)
	}
	return out
}

// ImportFunction picks the LIST function a points file registers into: fn
// when given, else the one the JSON form names, else the map's only LIST
// function.
func (m *Map) ImportFunction(fn string, ps []PointLine) (Function, error) {
	if fn == "" {
		for _, p := range ps {
			if p.Func != "" && fn != "" && p.Func != fn {
				return Function{}, badInput("the file holds the points of functions %s and %s: choose one with --function", fn, p.Func)
			}
			if p.Func != "" {
				fn = p.Func
			}
		}
	}
	if fn == "" {
		var lists []string
		var only Function
		for _, f := range m.Functions {
			if f.Type == List {
				lists, only = append(lists, f.Name), f
			}
		}
		switch len(lists) {
		case 1:
			return only, nil
		case 0:
			return Function{}, badInput("the shard map has no LIST function: add one with 'shardctl shardmap add-function NAME --type LIST'")
		}
		return Function{}, badInput("the shard map has several LIST functions (%s): choose one with --function", strings.Join(lists, ", "))
	}
	f, err := m.Function(fn)
	if err != nil {
		return f, badInput("%v", err)
	}
	if f.Type != List {
		return f, badInput("function %s is %s: import takes the points of a LIST function", f.Name, f.Type)
	}
	return f, nil
}

// PlanImport checks every line of a points file against m as add-point
// checks one key (a key of f's type, a shard in the map) and finds the
// duplicates, then sorts the lines into added, re-pointed and unchanged.
// Lines of JSON that name another function are not f's and are left out.
func (m *Map) PlanImport(f Function, ps []PointLine) (*Import, error) {
	im := &Import{Function: f}
	have := map[string]*Mapping{}
	for i := range m.Mappings {
		if mp := &m.Mappings[i]; mp.FuncID == f.ID && mp.Kind == List && mp.Point != nil {
			have[mp.Point.String()] = mp
		}
	}
	shards := map[int]bool{}
	for _, l := range m.Locations {
		shards[l.ShardID] = true
	}
	seen := make(map[string]int, len(ps))
	other := ""
	for _, p := range ps {
		if p.Func != "" && p.Func != f.Name && p.Func != fmt.Sprint(f.ID) {
			other = p.Func
			continue
		}
		k, err := keyspace.ParseKey(p.Key, f.KeyType)
		if err != nil {
			return nil, badInput("line %d: %v", p.Line, err)
		}
		if f.KeyType == keyspace.StringKey && len(k.Str) > 255 {
			return nil, badInput("line %d: key of %d bytes; the map keeps at most 255", p.Line, len(k.Str))
		}
		p.Key = k.String()
		if at, dup := seen[p.Key]; dup {
			return nil, badInput("line %d: key %s is on line %d already: give each key once", p.Line, p.Key, at)
		}
		seen[p.Key] = p.Line
		if !shards[p.Shard] {
			return nil, badInput("line %d: unknown shard %d: add it first with 'shardctl shardmap add-shard'", p.Line, p.Shard)
		}
		mp, ok := have[p.Key]
		switch {
		case !ok:
			im.Added = append(im.Added, p)
		case mp.ShardID == p.Shard:
			im.Unchanged++
		default:
			im.Repointed = append(im.Repointed, Repoint{PointLine: p, From: mp.ShardID, Status: mp.Status})
		}
	}
	if other != "" && len(seen) == 0 {
		return nil, badInput("the file holds the points of function %s, not %s: import it with --function %s", other, f.Name, other)
	}
	return im, nil
}

// ExportPoints are function f's LIST points in m, in key order.
func (m *Map) ExportPoints(f Function) []PointLine {
	var out []PointLine
	for _, mp := range m.MappingsOf(f.ID) {
		if mp.Kind == List && mp.Point != nil {
			out = append(out, PointLine{Key: mp.Point.String(), Shard: mp.ShardID})
		}
	}
	return out
}

// WritePointsCSV writes points as the CSV import reads, header first.
func WritePointsCSV(w io.Writer, ps []PointLine) error {
	cw := csv.NewWriter(w)
	if err := cw.Write([]string{"key", "shard"}); err != nil {
		return err
	}
	rec := make([]string, 2)
	for _, p := range ps {
		rec[0], rec[1] = p.Key, strconv.Itoa(p.Shard)
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// OfFunction is the part of m that is function f's: its locations, the
// function, its columns and its mappings (what 'shardmap export -o json'
// writes, in the form 'shardmap show -o json' has).
func (m *Map) OfFunction(f Function) *Map {
	out := &Map{Version: m.Version, Locations: m.Locations, Functions: []Function{f}, Mappings: m.MappingsOf(f.ID)}
	for _, c := range m.Columns {
		if c.FuncID == f.ID {
			out.Columns = append(out.Columns, c)
		}
	}
	return out
}
