package load

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strconv"

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

	places, byID := placesOf(m)
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
	for _, p := range places {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		err := readPlace(ctx, pools, creds, p, keys, func(k int64, val string) {
			found[k] = append(found[k], hit{p, val})
			rep.PerShard[p.ids[0]]++
		})
		if err == nil {
			p.fenced, err = fencedCopy(ctx, pools[p.loc.Addr().String()], p.loc.Schema)
		}
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

// placesOf returns the shard map's distinct server+schema pairs.
func placesOf(m *shardmap.Map) ([]*place, map[int]*place) {
	var out []*place
	byKey := map[string]*place{}
	byID := map[int]*place{}
	for _, l := range m.Locations {
		k := l.Addr().String() + "/" + l.Schema
		p := byKey[k]
		if p == nil {
			p = &place{loc: l}
			byKey[k] = p
			out = append(out, p)
		}
		p.ids = append(p.ids, l.ShardID)
		p.mapped = p.mapped || len(m.ShardMappings(l.ShardID)) > 0
		byID[l.ShardID] = p
	}
	return out, byID
}

// readPlace reports every ledger key present at p with its last_name.
func readPlace(ctx context.Context, pools map[string]*sql.DB, creds dbutil.Creds, p *place, keys []int64, fn func(int64, string)) error {
	addr := p.loc.Addr()
	db := pools[addr.String()]
	if db == nil {
		var err error
		if db, err = dbutil.Open(ctx, addr, creds, ""); err != nil {
			return err
		}
		pools[addr.String()] = db
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
