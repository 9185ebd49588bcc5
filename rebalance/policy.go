// Package rebalance is the pure policy behind 'shardctl rebalance': given
// each shard's size and server, it proposes splits, merges and moves that
// bring every shard and server inside the limits. It reads no database; the
// command gathers the fleet and runs each proposal as an ordinary plan.
//
// One pass proposes at most one operation per shard, but for a LIST shard
// over its limit the whole chain of splits it needs. Its effects are
// simulated (a split leaves half on the source and half on the chosen
// server, a merge adds the shard to its neighbour's server), so the moves
// that follow account for the splits and merges before them. A dedicated
// shard is never touched (counted in its server's rows), and a key moved
// within the cool-down (Policy.MinKeyAge) stays where it is.
package rebalance

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/shardctl/shardctl/operation"
)

// Shard is one shard as the policy sees it.
type Shard struct {
	ID     int    `json:"shard_id"`
	Server string `json:"server"`
	Func   int    `json:"func_id"` // partition function (0: not one single mapping; never split or merged)
	Kind   string `json:"kind"`    // RANGE or HASH split and merge; anything else only moves
	Order  int    `json:"order"`   // position among the function's mappings: ranges by lower bound, ring points ascending
	Rows   int64  `json:"rows"`
	Bytes  int64  `json:"bytes"`
	// Busy shards (an operator's unfinished plan, or one in flight) are
	// counted in their server's total but never touched; BusyWith says why.
	Busy     bool   `json:"busy,omitempty"`
	BusyWith string `json:"busy_with,omitempty"`
	// Dedicated shards (shardmap set-policy, or a tenant isolated by
	// 'move --keys --to') are counted and never touched: no key moves into
	// or out of them, and they are not moved, split or merged.
	Dedicated bool `json:"dedicated,omitempty"`
	// Keys are a LIST shard's tenants with rows, heaviest first (read when a
	// limit needs them): such a shard gives away keys rather than move whole,
	// and a tenant over --max-shard-rows is isolated on a shard of its own.
	// Not in the report: a fleet's tenants can be millions; Tenants counts them.
	Keys    []Key `json:"-"`
	Tenants int   `json:"tenants,omitempty"`
}

// Key is one tenant (a LIST point), its rows over the sharded tables and
// the bytes they take, and when it last moved (nil: not since the shard
// map kept it).
type Key struct {
	Key     string     `json:"key"`
	Rows    int64      `json:"rows"`
	Bytes   int64      `json:"bytes"`
	MovedAt *time.Time `json:"moved_at,omitempty"`
}

// Unmet is a limit the proposal leaves violated, and why nothing was
// proposed for it.
type Unmet struct {
	Shard  int    `json:"shard_id,omitempty"` // 0: a server's limit
	Server string `json:"server"`
	Why    string `json:"why"`
}

func (u Unmet) String() string {
	if u.Shard != 0 {
		return fmt.Sprintf("shard %d (%s): %s", u.Shard, u.Server, u.Why)
	}
	return fmt.Sprintf("server %s: %s", u.Server, u.Why)
}

// busyWhy names what keeps s busy.
func busyWhy(s Shard) string {
	if s.BusyWith != "" {
		return "skipped, busy with " + s.BusyWith
	}
	return "skipped, busy with another plan"
}

// Policy is the limits; a zero limit is off.
type Policy struct {
	MaxShardRows, MaxShardBytes int64
	MinShardRows, MinShardBytes int64
	MaxServerShare              float64  // of all rows, per server
	Drain                       []string // servers to empty
	Servers                     []string // servers that may receive shards besides those holding some
	// MinKeyAge is the cool-down: a key that moved less than this before
	// Now is not moved again (0: off).
	MinKeyAge time.Duration
	Now       time.Time
}

// Operation kinds: the operations the policy proposes.
const (
	Split    = operation.Split
	Merge    = operation.Merge
	Move     = operation.Move
	MoveKeys = operation.MoveKeys
)

// Op is one proposed operation.
type Op struct {
	Kind  string `json:"operation"`
	Shard int    `json:"shard_id"`
	Into  int    `json:"into,omitempty"` // merge, move-keys: the shard that receives the rows
	From  string `json:"from"`           // the shard's server
	To    string `json:"to"`             // split, move: the server that receives rows; merge, move-keys: Into's server
	// Keys are the LIST keys that move (move-keys into Into, or a split that
	// puts them on a new shard on To); empty: the whole shard, or a split at
	// the median.
	Keys   []string `json:"keys,omitempty"`
	Rows   int64    `json:"rows"`
	Reason string   `json:"reason"`
}

// Servers are the distinct servers touched by op.
func (o Op) Servers() []string {
	if o.From == o.To {
		return []string{o.From}
	}
	return []string{o.From, o.To}
}

// Shards are the shards op changes.
func (o Op) Shards() []int {
	if o.Into != 0 {
		return []int{o.Shard, o.Into}
	}
	return []int{o.Shard}
}

func (o Op) String() string { return o.Describe() + ": " + o.Reason }

// Describe is what op does, without why (String adds the reason): a line
// of its own in the text report, with keys as runs and a count.
func (o Op) Describe() string {
	switch {
	case o.Kind == Merge:
		return fmt.Sprintf("merge shard %d into shard %d (%s)", o.Shard, o.Into, o.To)
	case len(o.Keys) > 0 && o.Into != 0:
		return fmt.Sprintf("move keys %s, %d rows, of shard %d (%s) into shard %d (%s)", KeyRuns(o.Keys), o.Rows, o.Shard, o.From, o.Into, o.To)
	case len(o.Keys) > 0:
		return fmt.Sprintf("move keys %s, %d rows, of shard %d (%s) to a new shard on %s", KeyRuns(o.Keys), o.Rows, o.Shard, o.From, o.To)
	default:
		return fmt.Sprintf("%s shard %d from %s to %s", o.Kind, o.Shard, o.From, o.To)
	}
}

// Valid checks the policy for a run: errors an operator must fix.
func (p Policy) Valid() error {
	if p.MaxServerShare < 0 || p.MaxServerShare > 1 {
		return fmt.Errorf("--max-server-share %g: give a fraction between 0 (off) and 1", p.MaxServerShare)
	}
	if p.MaxShardRows > 0 && p.MinShardRows >= p.MaxShardRows {
		return fmt.Errorf("--min-shard-rows %d must be below --max-shard-rows %d (or a merge would be split again)", p.MinShardRows, p.MaxShardRows)
	}
	if p.MaxShardBytes > 0 && p.MinShardBytes >= p.MaxShardBytes {
		return fmt.Errorf("--min-shard-bytes %d must be below --max-shard-bytes %d", p.MinShardBytes, p.MaxShardBytes)
	}
	return nil
}

type state struct {
	p      Policy
	load   map[string]int64 // rows per server, as the proposals so far leave it
	total  int64
	used   map[int]bool
	drain  map[string]bool
	places []string // servers that may receive rows
	// lists are the LIST shards on each server that may receive keys, and
	// rows each one's rows as the proposals so far leave them.
	lists map[string][]*Shard
	rows  map[int]int64
}

// Propose returns the operations that bring the fleet inside the policy:
// drains first, then splits, merges, and moves for the server share.
func Propose(shards []Shard, p Policy) []Op {
	ops, _ := Assess(shards, p)
	return ops
}

// Assess is Propose, and also lists each limit the operations leave
// violated with why nothing was proposed for it (a busy shard, no server
// that may receive it, no shard that fits), so a run never reports a fleet
// inside the policy when it is not.
// Long on purpose: drain, split, merge and share run in that order on one
// state, each commented, so the policy reads top to bottom.
func Assess(shards []Shard, p Policy) ([]Op, []Unmet) {
	st := &state{p: p, load: map[string]int64{}, used: map[int]bool{}, drain: map[string]bool{}, lists: map[string][]*Shard{}, rows: map[int]int64{}}
	for _, d := range p.Drain {
		st.drain[d] = true
	}
	seen := map[string]bool{}
	for _, s := range shards {
		st.load[s.Server] += s.Rows
		st.total += s.Rows
		seen[s.Server] = true
		if s.Busy || s.Dedicated {
			st.used[s.ID] = true
		}
		st.rows[s.ID] = s.Rows
	}
	for i := range shards {
		if s := &shards[i]; s.Kind == "LIST" && s.Func != 0 && !s.Busy && !s.Dedicated {
			st.lists[s.Server] = append(st.lists[s.Server], s)
		}
	}
	for _, srv := range p.Servers {
		seen[srv] = true
	}
	for srv := range seen {
		if !st.drain[srv] {
			st.places = append(st.places, srv)
		}
	}
	sort.Strings(st.places)
	byRows := append([]Shard(nil), shards...)
	sort.SliceStable(byRows, func(i, j int) bool { return byRows[i].Rows > byRows[j].Rows })

	var ops []Op
	var unmet []Unmet
	// Drain: every shard off the drained servers, largest first.
	for _, s := range byRows {
		if !st.drain[s.Server] {
			continue
		}
		switch {
		case s.Dedicated:
			unmet = append(unmet, Unmet{s.ID, s.Server, fmt.Sprintf("on a drained server, but dedicated: 'shardctl move --shard %d --to HOST:PORT' moves it, or 'shardmap set-policy --no-dedicated' frees it", s.ID)})
		case st.used[s.ID]:
			unmet = append(unmet, Unmet{s.ID, s.Server, "on a drained server, " + busyWhy(s)})
		case len(st.places) == 0:
			unmet = append(unmet, Unmet{s.ID, s.Server, "on a drained server, and every server is drained: no server may receive it (name one with --server HOST:PORT)"})
		default:
			ops = append(ops, st.move(s, st.lightest(""), "drain "+s.Server))
		}
	}
	if len(st.places) == 0 {
		return ops, unmet
	}
	// Split what is too big, at its median key (ring arc midpoint); the upper half goes to the lightest server.
	for _, s := range byRows {
		if st.used[s.ID] && !s.Busy {
			continue // drained above
		}
		var why string
		switch {
		case p.MaxShardRows > 0 && s.Rows > p.MaxShardRows:
			why = fmt.Sprintf("%d rows, over --max-shard-rows %d", s.Rows, p.MaxShardRows)
		case p.MaxShardBytes > 0 && s.Bytes > p.MaxShardBytes:
			why = fmt.Sprintf("%d bytes, over --max-shard-bytes %d", s.Bytes, p.MaxShardBytes)
		default:
			continue
		}
		switch {
		case s.Busy:
			unmet = append(unmet, Unmet{s.ID, s.Server, why + ", " + busyWhy(s)})
			continue
		case s.Kind == "LIST" && s.Func != 0 && len(s.Keys) > 0:
			// A tenant alone on its shard is what isolation makes: inside
			// the policy (a key is never divided), not a limit left unmet.
			split, left := st.splitKeys(s, why)
			ops = append(ops, split...)
			if left != "" {
				unmet = append(unmet, Unmet{s.ID, s.Server, why + ", " + left})
			}
			continue
		case (s.Kind != "RANGE" && s.Kind != "HASH") || s.Func == 0:
			unmet = append(unmet, Unmet{s.ID, s.Server, why + ", but only a shard with exactly one RANGE or HASH mapping splits, or a LIST shard by its keys"})
			continue
		}
		to := st.lightest("")
		st.used[s.ID] = true
		half := s.Rows / 2
		st.load[s.Server] -= half
		st.load[to] += half
		ops = append(ops, Op{Kind: Split, Shard: s.ID, From: s.Server, To: to, Rows: half, Reason: why})
	}
	// Merge neighbours whose sum is small: the smaller goes into the larger
	// (on the ring, a point merges into the one below it).
	ops = append(ops, st.merges(shards)...)
	unmet = append(unmet, st.listMergesUnmet(shards)...)
	// Moves: no server above its share.
	if p.MaxServerShare > 0 && st.total > 0 {
		limit := int64(p.MaxServerShare * float64(st.total))
		ops = append(ops, st.shareMoves(byRows, limit)...)
		for _, srv := range st.places {
			if st.load[srv] > limit {
				unmet = append(unmet, Unmet{Server: srv, Why: fmt.Sprintf("holds %s of the rows, over --max-server-share %s: nothing it may give fits elsewhere (busy, dedicated, recently moved stay; --server HOST:PORT adds a receiver)", st.share(srv), pct(p.MaxServerShare))})
			}
		}
	}
	return ops, unmet
}

// unit is what a server gives away: a whole shard, or one key of a LIST
// shard whose keys were read (a tenant moves, not the shard it shares).
type unit struct {
	s    *Shard
	key  string // "": the whole shard
	rows int64
}

// shareMoves brings every server under limit rows in two passes, as bin
// packing does. First each server over it picks what to give away, in as few
// units as can be (the smallest unit that covers what is left of its
// excess, else its largest; the count is then the lower bound of moves for
// that server). Then the picked units are placed largest first, each on the
// receiver with the most room, so the big ones find room before the small
// ones fill it. A unit that fits no receiver stays (its server stays over
// its share, which the caller reports). A LIST shard's keys go into a LIST
// shard of their function on the receiver (move-keys), or onto a new shard
// there when it has none with room; the keys of one shard bound for one
// destination are one operation.
// Long on purpose: the two passes share the picked units and the receivers'
// room, which one function keeps in view.
func (st *state) shareMoves(byRows []Shard, limit int64) []Op {
	onServer := map[string][]unit{}
	for i := range byRows {
		s := &byRows[i]
		if s.Kind != "LIST" || s.Func == 0 || len(s.Keys) == 0 {
			onServer[s.Server] = append(onServer[s.Server], unit{s: s, rows: s.Rows})
			continue
		}
		for _, k := range s.Keys {
			if k.Rows > 0 && !st.p.cooling(k) {
				onServer[s.Server] = append(onServer[s.Server], unit{s: s, key: k.Key, rows: k.Rows})
			}
		}
	}
	type pick struct {
		u   unit
		why string
	}
	var picks []pick
	giving := map[string]bool{}
	for _, srv := range st.places {
		excess := st.load[srv] - limit
		if excess <= 0 {
			continue
		}
		giving[srv] = true
		why := fmt.Sprintf("%s holds %.0f%% of the rows, over --max-server-share %.0f%%", srv, 100*float64(st.load[srv])/float64(st.total), 100*st.p.MaxServerShare)
		var units []unit
		for _, u := range onServer[srv] {
			if !st.used[u.s.ID] && u.rows > 0 {
				units = append(units, u)
			}
		}
		sort.SliceStable(units, func(i, j int) bool { return units[i].rows > units[j].rows })
		taken := make([]bool, len(units))
		first := 0 // the largest not taken
		for excess > 0 {
			for first < len(units) && taken[first] {
				first++
			}
			if first == len(units) {
				break
			}
			// Largest first: the last that covers the excess is the smallest.
			best := first
			for i := sort.Search(len(units), func(i int) bool { return units[i].rows < excess }) - 1; i > first; i-- {
				if !taken[i] {
					best = i
					break
				}
			}
			taken[best] = true
			excess -= units[best].rows
			picks = append(picks, pick{units[best], why})
		}
	}
	sort.SliceStable(picks, func(i, j int) bool { return picks[i].u.rows > picks[j].u.rows })
	var ops []Op
	type dest struct {
		from, into int
		to         string
	}
	group := map[dest]int{} // index in ops of the key move from one shard to one destination
	var sources []int
	for _, pk := range picks {
		to := ""
		for _, srv := range st.places {
			if !giving[srv] && (to == "" || st.load[srv] < st.load[to]) {
				to = srv
			}
		}
		if to == "" || st.load[to]+pk.u.rows > limit {
			continue
		}
		if pk.u.key == "" {
			ops = append(ops, st.move(*pk.u.s, to, pk.why))
			continue
		}
		s := pk.u.s
		d := dest{from: s.ID, into: st.receiver(s, to, pk.u.rows), to: to}
		st.load[s.Server] -= pk.u.rows
		st.load[to] += pk.u.rows
		st.rows[s.ID] -= pk.u.rows
		st.rows[d.into] += pk.u.rows
		if i, ok := group[d]; ok {
			ops[i].Keys = append(ops[i].Keys, pk.u.key)
			ops[i].Rows += pk.u.rows
			continue
		}
		op := Op{Kind: Split, Shard: s.ID, From: s.Server, To: to, Keys: []string{pk.u.key}, Rows: pk.u.rows, Reason: pk.why}
		if d.into != 0 {
			op.Kind, op.Into = MoveKeys, d.into
		}
		group[d] = len(ops)
		ops = append(ops, op)
		sources = append(sources, s.ID)
	}
	for _, id := range sources {
		st.used[id] = true // it gives keys this pass: it neither moves nor receives
	}
	return ops
}

// receiver is the LIST shard of s's function on server to with the fewest
// rows that can take rows more (within --max-shard-rows), or 0 when there is
// none: the keys then go to a new shard there.
func (st *state) receiver(s *Shard, to string, rows int64) int {
	best := 0
	for _, r := range st.lists[to] {
		if r.Func != s.Func || st.used[r.ID] || st.p.MaxShardRows > 0 && st.rows[r.ID]+rows > st.p.MaxShardRows {
			continue
		}
		if best == 0 || st.rows[r.ID] < st.rows[best] {
			best = r.ID
		}
	}
	return best
}

func (st *state) share(srv string) string { return pct(float64(st.load[srv]) / float64(st.total)) }

func pct(f float64) string {
	return strings.TrimSuffix(strconv.FormatFloat(100*f, 'f', 1, 64), ".0") + "%"
}

func (st *state) move(s Shard, to, why string) Op {
	st.used[s.ID] = true
	st.load[s.Server] -= s.Rows
	st.load[to] += s.Rows
	return Op{Kind: Move, Shard: s.ID, From: s.Server, To: to, Rows: s.Rows, Reason: why}
}

func (st *state) merges(shards []Shard) []Op {
	p := st.p
	if p.MinShardRows <= 0 && p.MinShardBytes <= 0 {
		return nil
	}
	funcs := map[int][]Shard{}
	for _, s := range shards {
		if s.Func != 0 && (s.Kind == "RANGE" || s.Kind == "HASH") {
			funcs[s.Func] = append(funcs[s.Func], s)
		}
	}
	ids := make([]int, 0, len(funcs))
	for id := range funcs {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	small := st.underMin
	var ops []Op
	for _, id := range ids {
		fs := funcs[id]
		sort.Slice(fs, func(i, j int) bool { return fs[i].Order < fs[j].Order })
		n := len(fs)
		pairs := n - 1
		if n > 2 && fs[0].Kind == "HASH" {
			pairs = n // the ring wraps: the first point merges into the last
		}
		for i := 0; i < pairs; i++ {
			lo, hi := fs[i], fs[(i+1)%n]
			if st.used[lo.ID] || st.used[hi.ID] || st.drain[lo.Server] || st.drain[hi.Server] || !small(lo, hi) {
				continue
			}
			src, dst := lo, hi
			if hi.Kind == "HASH" || hi.Rows <= lo.Rows {
				src, dst = hi, lo
			}
			st.used[lo.ID], st.used[hi.ID] = true, true
			st.load[src.Server] -= src.Rows
			st.load[dst.Server] += src.Rows
			ops = append(ops, Op{Kind: Merge, Shard: src.ID, Into: dst.ID, From: src.Server, To: dst.Server, Rows: src.Rows,
				Reason: fmt.Sprintf("together %d rows, under --min-shard-rows %d", lo.Rows+hi.Rows, p.MinShardRows)})
		}
	}
	return ops
}

// underMin reports whether two shards together are under every minimum set.
func (st *state) underMin(a, b Shard) bool {
	rowsOK := st.p.MinShardRows <= 0 || a.Rows+b.Rows < st.p.MinShardRows
	bytesOK := st.p.MinShardBytes <= 0 || a.Bytes+b.Bytes < st.p.MinShardBytes
	return rowsOK && bytesOK
}

// listMergesUnmet: the minimums do not merge LIST shards (any two of a
// function could merge, and which two is a choice about tenants), so two
// LIST shards of a function that together are under them leave the fleet
// outside the policy: an unmet entry each for the smallest pairs, naming
// the merge to run by hand (issue 53; docs/cron.md).
func (st *state) listMergesUnmet(shards []Shard) []Unmet {
	p := st.p
	if p.MinShardRows <= 0 && p.MinShardBytes <= 0 {
		return nil
	}
	funcs := map[int][]Shard{}
	var ids []int
	for _, s := range shards {
		if s.Kind != "LIST" || s.Func == 0 || st.used[s.ID] || st.drain[s.Server] {
			continue
		}
		if funcs[s.Func] == nil {
			ids = append(ids, s.Func)
		}
		funcs[s.Func] = append(funcs[s.Func], s)
	}
	sort.Ints(ids)
	var out []Unmet
	for _, id := range ids {
		fs := funcs[id]
		sort.SliceStable(fs, func(i, j int) bool { return fs[i].Rows < fs[j].Rows })
		// Smallest first: once the two smallest left are not under the
		// minimums, no two are.
		for i := 0; i+1 < len(fs) && st.underMin(fs[i], fs[i+1]); i += 2 {
			a, b := fs[i], fs[i+1]
			limit := fmt.Sprintf("%d rows, under --min-shard-rows %d", a.Rows+b.Rows, p.MinShardRows)
			if p.MinShardRows <= 0 {
				limit = fmt.Sprintf("%d bytes, under --min-shard-bytes %d", a.Bytes+b.Bytes, p.MinShardBytes)
			}
			out = append(out, Unmet{a.ID, a.Server, fmt.Sprintf("with LIST shard %d together %s, but rebalance does not merge LIST shards (which two is a choice about their tenants): merge them by hand: shardctl merge --shard %d --into %d", b.ID, limit, a.ID, b.ID)})
		}
	}
	return out
}

// lightest is the receiving server with the fewest rows, other than not.
func (st *state) lightest(not string) string {
	best := ""
	for _, s := range st.places {
		if s != not && (best == "" || st.load[s] < st.load[best]) {
			best = s
		}
	}
	return best
}

// CanStart reports whether op may start next to running: never two
// operations on one shard, and unless sameServer, never two on one server.
func CanStart(op Op, running []Op, sameServer bool) bool {
	for _, r := range running {
		for _, a := range op.Shards() {
			for _, b := range r.Shards() {
				if a == b {
					return false
				}
			}
		}
		if sameServer {
			continue
		}
		for _, a := range op.Servers() {
			for _, b := range r.Servers() {
				if a == b {
					return false
				}
			}
		}
	}
	return true
}
