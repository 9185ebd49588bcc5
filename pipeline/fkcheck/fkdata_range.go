package fkcheck

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/shardctl/shardctl/chunk"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/tables"
)

// Matching by key range. Joining a chunk costs the server an index lookup of
// the parent per child row (about 1.5 us of server CPU a row here), nearly
// all of the check. When the key is one integer column referencing the
// parent's one-column integer primary key, and a chunk's children reference
// a narrow range of parents (as children written after their parents do),
// the server reads the chunk's children and that range of parents in key
// order instead, both in one snapshot: it sums up each side when the
// chunk's children are all on one side (as when the shard key grows with
// the child's primary key), and shardctl matches their lists otherwise. A
// chunk whose parents are spread wider than rangeSpan times its rows, or in
// which a crossing is found, is joined by the server as before (the join
// counts and names the rows).

// rangeSpan bounds the parents read for a chunk, per child row.
const rangeSpan = 8

// rangeMatchable reports whether key k can be matched by key range.
func rangeMatchable(ctx context.Context, db *sql.DB, schema string, child, parent tables.Table, k tables.ForeignKey) (bool, error) {
	if len(k.Columns) != 1 || len(parent.PK) != 1 || k.RefColumns[0] != parent.PK[0] {
		return false, nil
	}
	cc, err := chunk.Probe(ctx, db, schema, child.Name, k.Columns)
	if err != nil {
		return false, fmt.Errorf("probe %s: %w", child.Name, err)
	}
	pc, err := chunk.Probe(ctx, db, schema, parent.Name, parent.PK)
	if err != nil {
		return false, fmt.Errorf("probe %s: %w", parent.Name, err)
	}
	return fitsInt64(cc[0]) && fitsInt64(pc[0]), nil
}

// fitsInt64 reports whether every value of c is an int64 (what shardctl
// matches and walks keys on): integers, but not an unsigned BIGINT.
func fitsInt64(c chunk.Column) bool {
	return c.Kind == chunk.Signed || c.Kind == chunk.Unsigned && !strings.Contains(c.Type, "BIGINT")
}

// keyListMax is the session's group_concat_max_len while a chunk's lists
// are read: a chunk's list holds up to (rangeSpan+1) * 50,000 keys of up to
// 20 bytes. A list this long may have been cut short (the server cuts it at
// exactly this many bytes, possibly inside a key): the chunk is then joined.
var keyListMax = 16 << 20

// matchByRange reports the chunk's children read and whether any child and
// its parent are on two sides, reading in one read-only snapshot. ok is
// false when the parents are too spread (or a list came back cut short):
// the chunk is then joined.
//
// First the server sums up the chunk's children: their key's bounds, and
// how many of them move out of how many have a side. When those with a side
// are all on one side, the parents in the range the children reference are
// summed up the same way, and parents all on that side (or without one)
// settle the chunk without a list. Otherwise shardctl matches lists: the
// keys of the children that move and of those that stay, each one
// GROUP_CONCAT of plain integers (one list of KEY*2+side would overflow on
// a BIGINT key), and the parents' the same way. Read row by row through the
// driver, shardctl spent as much CPU on the rows as the server saved.
// Server CPU per chunk, against the lists of CONCAT(key, side letter) used
// before: the sums about half on MySQL 9.7 (0.4-0.7 on MariaDB 10.11); the
// two integer lists 0.8-0.9 on MySQL but about 1.1 on MariaDB (one list of
// KEY*2+side: 0.6-0.9 and about 1.0). A child or parent whose side is NULL
// is in neither list and crosses nothing, as in the join. mixed is shared
// by the key's chunks: set when a chunk's children were on both sides, so
// the next chunk reads its children's lists at once (children mixed
// throughout pay for no sums).
// Long on purpose: the sums, then the lists, run in one read-only snapshot in
// the order above; split apart the snapshot would have to be passed along.
func matchByRange(ctx context.Context, db *sql.DB, schema string, child, parent tables.Table, k tables.ForeignKey,
	moves string, moveArgs []any, parentMoves string, parentArgs []any, rng string, rngArgs []any, mixed *atomic.Bool) (n int64, crossed, ok bool, err error) {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return 0, false, false, err
	}
	defer func() { _ = tx.Rollback() }()
	fk, pk := "c."+dbutil.QuoteIdent(k.Columns[0]), "p."+dbutil.QuoteIdent(parent.PK[0])
	kidsFrom := dbutil.Table(schema, child.Name) + " AS c WHERE " + rng
	kidArgs := append(append(append([]any{}, moveArgs...), moveArgs...), rngArgs...)
	parentsFrom := dbutil.Table(schema, parent.Name) + " AS p WHERE " + pk + " >= ? AND " + pk + " <= ?"
	parentArgsOf := func(lo, hi int64) []any {
		return append(append(append([]any{}, parentArgs...), parentArgs...), lo, hi)
	}
	// sums reads how many rows of from move (side true) and how many have a
	// side, after the columns of sel into dest.
	sums := func(sel, side, from string, args []any, dest ...any) (moving, sided int64, err error) {
		var m sql.NullInt64
		err = tx.QueryRowContext(ctx, "SELECT "+sel+"SUM("+side+"), COUNT("+side+") FROM "+from, args...).Scan(append(dest, &m, &sided)...)
		return m.Int64, sided, err
	}
	// lists reads the keys of the rows of from that move and of those that
	// stay, after the columns of sel into dest; full is false when one may
	// have been cut short.
	setMax := false
	lists := func(sel, key, side, from string, args []any, dest ...any) (move, stay []byte, full bool, err error) {
		if !setMax {
			if _, err := tx.ExecContext(ctx, "SET SESSION group_concat_max_len = "+strconv.Itoa(keyListMax)); err != nil {
				return nil, nil, false, err
			}
			setMax = true
		}
		q := "SELECT " + sel + "GROUP_CONCAT(IF(" + side + ", " + key + ", NULL)), GROUP_CONCAT(IF(NOT (" + side + "), " + key + ", NULL)) FROM " + from
		err = tx.QueryRowContext(ctx, q, args...).Scan(append(dest, &move, &stay)...)
		return move, stay, len(move) < keyListMax && len(stay) < keyListMax, err
	}
	// The children's one side: stays (0), moves (1), or both (2).
	sideOf := func(moving, sided int64) int {
		switch moving {
		case 0:
			return 0
		case sided:
			return 1
		}
		return 2
	}
	var lo, hi int64
	side := 2
	var kids []kid // the children's keys, once listed
	listed := false
	// readKids lists the children; false: cut short.
	readKids := func() (bool, error) {
		move, stay, full, err := lists("COUNT(*), ", fk, moves, kidsFrom, kidArgs, &n)
		if err != nil || !full {
			return false, err
		}
		kids, listed = kids[:0], true
		lo, hi = math.MaxInt64, math.MinInt64
		var m int64
		add := func(moves bool) func(int64) bool {
			return func(ref int64) bool {
				kids = append(kids, kid{ref, moves})
				lo, hi = min(lo, ref), max(hi, ref)
				if moves {
					m++
				}
				return true
			}
		}
		if !eachInt(move, add(true)) || !eachInt(stay, add(false)) {
			return false, nil
		}
		side = sideOf(m, int64(len(kids)))
		mixed.Store(side == 2)
		return true, nil
	}
	// spread reports whether the chunk's parents are too spread to read.
	spread := func() bool { return uint64(hi-lo) >= uint64(rangeSpan*n+4096) }
	if mixed.Load() {
		if full, err := readKids(); err != nil || !full {
			return n, false, false, err
		}
		if len(kids) == 0 {
			return n, false, true, nil
		}
	} else {
		var l, h sql.NullInt64
		moving, sided, err := sums("COUNT(*), MIN("+fk+"), MAX("+fk+"), ", moves, kidsFrom, kidArgs, &n, &l, &h)
		if err != nil {
			return 0, false, false, err
		}
		if !l.Valid || sided == 0 { // no child references a parent, or none has a side
			mixed.Store(false)
			return n, false, true, nil
		}
		lo, hi, side = l.Int64, h.Int64, sideOf(moving, sided)
		mixed.Store(side == 2)
	}
	if spread() {
		return n, false, false, nil
	}
	if side != 2 {
		moving, sided, err := sums("", parentMoves, parentsFrom, parentArgsOf(lo, hi))
		if err != nil {
			return 0, false, false, err
		}
		if sideOf(moving, sided) == side || sided == 0 {
			return n, false, true, nil
		}
	}
	// Parents on the other side than some children: match the lists.
	if !listed {
		if full, err := readKids(); err != nil || !full {
			return n, false, false, err
		}
		if len(kids) == 0 {
			return n, false, true, nil
		}
		if spread() {
			return n, false, false, nil
		}
	}
	move, stay, full, err := lists("", pk, parentMoves, parentsFrom, parentArgsOf(lo, hi))
	if err != nil {
		return 0, false, false, err
	}
	// sides[ref-lo]: 0 no parent (or none with a side), 1 the parent stays, 2 it moves.
	sides := make([]byte, hi-lo+1)
	mark := func(s byte) func(int64) bool {
		return func(ref int64) bool {
			if ref < lo || ref > hi {
				return false
			}
			sides[ref-lo] = s
			return true
		}
	}
	if !full || !eachInt(move, mark(2)) || !eachInt(stay, mark(1)) {
		return n, false, false, nil
	}
	for _, c := range kids {
		if s := sides[c.ref-lo]; s != 0 && (s == 2) != c.moves {
			return n, true, true, nil
		}
	}
	return n, false, true, nil
}

// kid is a child's key and side, as matchByRange matches them.
type kid struct {
	ref   int64
	moves bool
}

// eachInt calls fn for each integer of a comma-separated list (nil: none)
// until fn returns false; it reports false then, and on anything else than
// such a list (an empty key, a stray byte, a key out of the int64 range).
func eachInt(l []byte, fn func(int64) bool) bool {
	for len(l) > 0 {
		i := 0
		for i < len(l) && l[i] != ',' {
			i++
		}
		v, ok := parseInt(l[:i])
		if !ok || !fn(v) {
			return false
		}
		if i == len(l) {
			break
		}
		l = l[i+1:]
		if len(l) == 0 {
			return false // a trailing comma
		}
	}
	return true
}

// parseInt parses a decimal int64 (an optional minus sign, then digits)
// without the string strconv.ParseInt would take.
func parseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
	}
	switch {
	case neg && u <= 1<<63:
		return int64(-u), true // -2^63 wraps to itself
	case !neg && u < 1<<63:
		return int64(u), true
	}
	return 0, false
}
