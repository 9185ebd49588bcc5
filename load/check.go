package load

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/shardmap"
)

// CheckReport is Check's verdict: the ledger holds when Problems is empty.
type CheckReport struct {
	Keys     int         // keys in the ledger
	Present  int         // keys found at their shard
	Absent   int         // keys not found at their shard (readable shards only)
	Problems []string    // each a lost, wrong, misplaced or unreadable key or shard
	Notes    []string    // tolerated oddities (a dropped empty schema, a cut-off last ledger line)
	PerShard map[int]int // keys found per shard id, misplaced ones included
}

// OK reports the verdict.
func (r CheckReport) OK() bool { return len(r.Problems) == 0 }

func (r CheckReport) String() string {
	verdict := "OK"
	if !r.OK() {
		verdict = fmt.Sprintf("%d PROBLEMS", len(r.Problems))
	}
	ids := make([]int, 0, len(r.PerShard))
	for id := range r.PerShard {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	per := ""
	for _, id := range ids {
		per += fmt.Sprintf(" shard %d: %d;", id, r.PerShard[id])
	}
	return fmt.Sprintf("%s: %d keys, %d present at their shard, %d absent;%s", verdict, r.Keys, r.Present, r.Absent, per)
}

// checkBatch is the number of keys per IN list.
const checkBatch = 1000

// place is one distinct server and schema of the shard map, with the shard
// ids that name it (normally exactly one).
type place struct {
	loc    shardmap.Location
	ids    []int
	mapped bool // some mapping points at it
	fenced bool // its table carries shardctl's fence: a copy kept inside a reverse window
}

func (p place) String() string {
	return fmt.Sprintf("shard %d (%s/%s)", p.ids[0], p.loc.Addr(), p.loc.Schema)
}

// Check verifies the ledger against the shards: every key it wrote holds its
// final state at the key's current shard (per the shard map now) and exists
// on no other shard. Its error is for I/O on the ledger and the shard map
// only; everything wrong with the shards is a Problem.
// Long on purpose: one pass, each stage feeding the next (ledger, owner per
// the shard map, the shards' rows, the comparison).
func Check(ctx context.Context, store *shardmap.Store, creds dbutil.Creds, ledger string) (CheckReport, error) {
	rep := CheckReport{PerShard: map[int]int{}}
	entries, err := ReadLedger(ledger)
	if errors.Is(err, ErrTruncated) {
		rep.Notes = append(rep.Notes, err.Error()+": dropped it")
	} else if err != nil {
		return rep, err
	}
	want := Fold(entries)
	rep.Keys = len(want)
	keys := make([]int64, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })

	m, err := store.Load(ctx)
	if err != nil {
		return rep, fmt.Errorf("check: %w", err)
	}
	f, _, ok := m.TableFunction(Table)
	if !ok {
		return rep, fmt.Errorf("check: table %q is not sharded in shard map %s", Table, store.Schema)
	}

	places, byID := placesOf(m, f)
	owner := map[int64]*place{}
	for _, k := range keys {
		res, err := m.Lookup(f, strconv.FormatInt(k, 10))
		if err != nil {
			rep.Problems = append(rep.Problems, fmt.Sprintf("key %d has no shard in the shard map: %v", k, err))
			continue
		}
		owner[k] = byID[res.Location.ShardID]
	}

	// found[k] lists the places holding key k, with its last_name there.
	type hit struct {
		p   *place
		val string
	}
	found := map[int64][]hit{}
	unreadable := map[*place]bool{}
	pools := map[string]*sql.DB{}
	defer func() {
		for _, db := range pools {
			db.Close()
		}
	}()
	errs := readPlaces(ctx, pools, creds, places, keys, func(p *place, k int64, val string) {
		found[k] = append(found[k], hit{p, val})
		rep.PerShard[p.ids[0]]++
	})
	for _, p := range places {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		err := errs[p]
		gone := dbutil.ErrNumber(err) == 1049 || dbutil.ErrNumber(err) == 1146
		switch {
		case err == nil:
		case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
			return rep, err
		case gone && !p.mapped:
			// An emptied source after a move: no mappings, schema dropped.
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s has no mappings and no employees table: holds nothing", p))
		default:
			unreadable[p] = true
			why := "cannot be read"
			if !p.mapped {
				why = "has no mappings but cannot be read, so it may still hold keys"
			}
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s %s: %v", p, why, err))
		}
	}

	copies := 0
	for _, k := range keys {
		own, x := owner[k], want[k]
		if own == nil {
			continue // reported above
		}
		atOwner, seen := Outcome{}, false
		for _, h := range found[k] {
			if h.p == own {
				atOwner, seen = Outcome{Present: true, Val: h.val}, true
				continue
			}
			if h.p.fenced {
				copies++ // the application cannot write there; the window's tail keeps it in sync
				continue
			}
			rep.Problems = append(rep.Problems, fmt.Sprintf("key %d present on another shard: found on %s (last_name %q) but it belongs to %s", k, h.p, h.val, own))
		}
		switch {
		case unreadable[own]:
			continue // the shard's problem is reported once
		case seen:
			rep.Present++
		default:
			rep.Absent++
		}
		if x.Allows(atOwner) {
			continue
		}
		switch {
		case !seen:
			rep.Problems = append(rep.Problems, fmt.Sprintf("key %d missing at its %s: want %s", k, own, x))
		case x.MayBeAbsent() && len(x.Allowed) == 1:
			rep.Problems = append(rep.Problems, fmt.Sprintf("key %d present at its %s with last_name %q but was deleted", k, own, atOwner.Val))
		default:
			rep.Problems = append(rep.Problems, fmt.Sprintf("key %d wrong value at its %s: last_name %q, want %s", k, own, atOwner.Val, x))
		}
	}
	if copies > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d keys also in a fenced copy (a reverse window keeps it until 'plan complete')", copies))
	}
	return rep, nil
}

// fencedCopy reports whether schema's ledger table is fenced by shardctl
// (an armed fence whose row is not set lets the application write: not fenced).
func fencedCopy(ctx context.Context, db *sql.DB, schema string) (bool, error) {
	return fence.Fences(ctx, db, schema, Table)
}

// placesOf returns the distinct server+schema pairs that may hold the
// ledger's table: the shards of its partition function f, and the shards
// with no mappings (an emptied source may still hold keys). A shard mapped
// only by another function holds other tables, so it is not read.
func placesOf(m *shardmap.Map, f shardmap.Function) ([]*place, map[int]*place) {
	var out []*place
	byKey := map[string]*place{}
	byID := map[int]*place{}
	for _, l := range m.Locations {
		ms := m.ShardMappings(l.ShardID)
		if len(ms) > 0 && !slices.ContainsFunc(ms, func(mp shardmap.Mapping) bool { return mp.FuncID == f.ID }) {
			continue
		}
		k := l.Addr().String() + "/" + l.Schema
		p := byKey[k]
		if p == nil {
			p = &place{loc: l}
			byKey[k] = p
			out = append(out, p)
		}
		p.ids = append(p.ids, l.ShardID)
		p.mapped = p.mapped || len(ms) > 0
		byID[l.ShardID] = p
	}
	return out, byID
}

// placesAtOnce bounds the places one statement reads (a UNION ALL of one
// SELECT per place), and argsAtOnce its placeholders.
const (
	placesAtOnce = 100
	argsAtOnce   = 30000
)

// readPlaces reports every ledger key present at each place with its
// last_name, and sets each place's fenced; the error of a place that could
// not be read is in the map. Per server, not per place: one statement lists
// the server's fenced schemas, one its schemas with the ledger's table, and
// each statement then reads up to placesAtOnce of them, so a thousand shards
// on three servers cost a few dozen statements, not two thousand. A place
// the server's statements do not cover (its table missing, a statement
// refused) is read alone, so its error is its own.
func readPlaces(ctx context.Context, pools map[string]*sql.DB, creds dbutil.Creds, places []*place, keys []int64, fn func(*place, int64, string)) map[*place]error {
	errs := map[*place]error{}
	var servers []string
	onServer := map[string][]*place{}
	for _, p := range places {
		a := p.loc.Addr().String()
		if onServer[a] == nil {
			servers = append(servers, a)
		}
		onServer[a] = append(onServer[a], p)
	}
	for _, a := range servers {
		ps := onServer[a]
		db, err := pool(ctx, pools, creds, ps[0].loc.Addr())
		if err != nil {
			for _, p := range ps {
				errs[p] = err
			}
			continue
		}
		fenced, ferr := fence.FencedSchemas(ctx, db, Table)
		have, terr := schemasWith(ctx, db, Table)
		var together, alone []*place
		for _, p := range ps {
			if terr == nil && have[p.loc.Schema] {
				together = append(together, p)
			} else {
				alone = append(alone, p)
			}
		}
		for len(together) > 0 {
			n := min(len(together), placesAtOnce)
			group := together[:n]
			together = together[n:]
			if err := readTogether(ctx, db, group, keys, fn); err != nil {
				if ctx.Err() != nil {
					errs[group[0]] = err
					return errs
				}
				alone = append(alone, group...)
			}
		}
		for _, p := range alone {
			errs[p] = readPlace(ctx, pools, creds, p, keys, func(k int64, v string) { fn(p, k, v) })
		}
		for _, p := range ps {
			switch {
			case errs[p] != nil:
			case ferr == nil:
				p.fenced = fenced[p.loc.Schema]
			default:
				p.fenced, errs[p] = fencedCopy(ctx, db, p.loc.Schema)
			}
		}
	}
	return errs
}

// schemasWith lists the schemas on db's server that have a table named table.
func schemasWith(ctx context.Context, db *sql.DB, table string) (map[string]bool, error) {
	have := map[string]bool{}
	var schema string
	err := dbutil.ScanEach(ctx, db, "SELECT TABLE_SCHEMA FROM information_schema.TABLES WHERE TABLE_NAME = ?", []any{table}, []any{&schema},
		func() error { have[schema] = true; return nil })
	if err != nil {
		return nil, fmt.Errorf("list the schemas with table %s: %w", table, err)
	}
	return have, nil
}

// readTogether reads the keys at every place of group (one server) with one
// statement per batch of keys; nothing is reported unless every statement
// succeeded, so a failed group can be read again place by place.
func readTogether(ctx context.Context, db *sql.DB, group []*place, keys []int64, fn func(*place, int64, string)) error {
	type row struct {
		i   int
		k   int64
		val string
	}
	var got []row
	batch := max(1, min(checkBatch, argsAtOnce/len(group)-1))
	for i := 0; i < len(keys); i += batch {
		ks := keys[i:min(i+batch, len(keys))]
		in := dbutil.Placeholders(len(ks))
		var q strings.Builder
		args := make([]any, 0, len(group)*(len(ks)+1))
		for j, p := range group {
			if j > 0 {
				q.WriteString(" UNION ALL ")
			}
			q.WriteString("SELECT ?, emp_no, last_name FROM " + dbutil.Table(p.loc.Schema, Table) + " WHERE emp_no IN (" + in + ")")
			args = append(args, j)
			for _, k := range ks {
				args = append(args, k)
			}
		}
		var r row
		if err := dbutil.ScanEach(ctx, db, q.String(), args, []any{&r.i, &r.k, &r.val}, func() error {
			if r.i < 0 || r.i >= len(group) {
				return fmt.Errorf("a row tagged %d of %d places", r.i, len(group))
			}
			got = append(got, r)
			return nil
		}); err != nil {
			return fmt.Errorf("read the ledger's keys at %d places from %s on %s: %w", len(group), group[0], group[0].loc.Addr(), err)
		}
	}
	for _, r := range got {
		fn(group[r.i], r.k, r.val)
	}
	return nil
}

func pool(ctx context.Context, pools map[string]*sql.DB, creds dbutil.Creds, addr dbutil.Addr) (*sql.DB, error) {
	if db := pools[addr.String()]; db != nil {
		return db, nil
	}
	db, err := dbutil.Open(ctx, addr, creds, "")
	if err != nil {
		return nil, err
	}
	pools[addr.String()] = db
	return db, nil
}

// readPlace reports every ledger key present at p with its last_name.
func readPlace(ctx context.Context, pools map[string]*sql.DB, creds dbutil.Creds, p *place, keys []int64, fn func(int64, string)) error {
	db, err := pool(ctx, pools, creds, p.loc.Addr())
	if err != nil {
		return err
	}
	for i := 0; i < len(keys); i += checkBatch {
		batch := keys[i:min(i+checkBatch, len(keys))]
		args := make([]any, len(batch))
		for j, k := range batch {
			args[j] = k
		}
		q := "SELECT emp_no, last_name FROM " + dbutil.Table(p.loc.Schema, Table) + " WHERE emp_no IN (" + dbutil.Placeholders(len(batch)) + ")"
		if err := scanRows(ctx, db, q, args, fn); err != nil {
			return err
		}
	}
	return nil
}

func scanRows(ctx context.Context, db *sql.DB, q string, args []any, fn func(int64, string)) error {
	var k int64
	var v string
	return dbutil.ScanEach(ctx, db, q, args, []any{&k, &v}, func() error { fn(k, v); return nil })
}
