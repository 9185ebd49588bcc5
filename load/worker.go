package load

// One writer of a key group: its writes through the router (a moved or
// fenced shard is looked up again), and the ledger entry of each write the
// server acknowledged or left ambiguous.

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strconv"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/router"
)

func (r *runner) worker(gs *groupState, w int, rng *rand.Rand) {
	own := ownedKeys(gs.g, w, r.cfg.Concurrency)
	if own.count == 0 {
		return
	}
	live := &keySet{idx: map[int64]int{}}
	mix := r.cfg.Mix
	total := mix.Insert + mix.Update + mix.Delete
	for {
		select {
		case <-r.stop:
			return
		default:
		}
		if gs.pace != nil && !gs.pace.wait(r.stop) {
			return
		}
		key, del := own.random(rng), false
		switch n := rng.Intn(total); {
		case n < mix.Insert:
		case n < mix.Insert+mix.Update:
			if len(live.keys) > 0 {
				key = live.keys[rng.Intn(len(live.keys))]
			}
		default:
			del = true
			if len(live.keys) > 0 {
				key = live.keys[rng.Intn(len(live.keys))]
			}
		}
		ok, ambiguous := r.write(gs, key, del)
		switch {
		case ok && del:
			live.remove(key)
		case ok:
			live.add(key)
		case ambiguous:
			live.remove(key) // unknown: don't build on it
		}
	}
}

// uncertain reports whether a statement that failed with err may still have
// been applied: the server answered with an error only when err carries a
// server error number (2006 and 2013 are the client's "connection lost").
func uncertain(err error) bool {
	switch dbutil.ErrNumber(err) {
	case 0, 2006, 2013:
		return true
	}
	return false
}

const upsertCols = "(emp_no, birth_date, first_name, last_name, gender, hire_date) VALUES (?, ?, ?, ?, ?, ?)" +
	" ON DUPLICATE KEY UPDATE last_name = VALUES(last_name), first_name = VALUES(first_name)"

// write runs one write and records it; ok means acknowledged.
func (r *runner) write(gs *groupState, key int64, del bool) (ok, ambiguous bool) {
	keyStr := strconv.FormatInt(key, 10)
	seq := r.seq.Add(1)
	e := Entry{Seq: seq, Key: key, Op: OpPut, Val: r.prefix + strconv.FormatInt(seq, 36)}
	if del {
		e.Op, e.Val = OpDel, ""
	}

	// Router.Do retries offline mappings without calling fn, so they are
	// counted here: wait while the key's mapping is offline.
	wait, gateStart := 2*time.Millisecond, time.Now()
	for {
		_, err := r.cfg.Router.Resolve(r.wctx, Table, keyStr)
		if !errors.Is(err, router.ErrOffline) || time.Since(gateStart) > gateFor {
			break
		}
		gs.retries.Add(1)
		r.cfg.Router.Invalidate()
		t := time.NewTimer(wait)
		select {
		case <-r.stop:
			t.Stop()
			return false, false // nothing was sent: the write never happened
		case <-t.C:
		}
		wait = min(2*wait, 50*time.Millisecond)
	}

	calls := 0
	err := r.cfg.Router.Do(r.wctx, Table, keyStr, func(ctx context.Context, t router.Target) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		calls++
		if calls > 1 {
			gs.retries.Add(1) // the previous attempt hit a moved shard
		}
		var err error
		if del {
			_, err = t.DB.ExecContext(ctx, "DELETE FROM "+t.Table(Table)+" WHERE emp_no = ?", key)
		} else {
			_, err = t.DB.ExecContext(ctx, "INSERT INTO "+t.Table(Table)+" "+upsertCols, rowValues(key, gs.g.Name, e.Val)...)
		}
		if err != nil && uncertain(err) {
			ambiguous = true
		}
		return err
	})
	if errors.Is(err, router.ErrUnconfirmed) {
		ambiguous = true // it ran; whether its shard still served the key is unknown
	}
	now := time.Now()
	e.T = now.UnixNano()
	switch {
	case err == nil:
		ambiguous = false // a retry of the same idempotent statement settled it
		if lerr := r.led.append(e); lerr != nil {
			r.fail(lerr)
		}
		gs.ack(now)
		return true, false
	case ambiguous:
		e.Ambiguous = true
		if lerr := r.led.append(e); lerr != nil {
			r.fail(lerr)
		}
		gs.ambiguous.Add(1)
	case r.wctx.Err() != nil:
		return false, false // abandoned at shutdown before anything was sent
	}
	gs.errors.Add(1)
	r.mu.Lock()
	r.lastErr = fmt.Sprintf("key %d: %v", key, err)
	r.mu.Unlock()
	return false, ambiguous
}

// rowValues are the columns of an upsert; all but last_name (the write's
// token) and first_name (the group) depend only on the key.
func rowValues(key int64, group, token string) []any {
	day := func(base time.Time, span int64) string {
		return base.AddDate(0, 0, int((key%span+span)%span)).Format("2006-01-02")
	}
	first := []rune(group)
	if len(first) > 14 {
		first = first[:14]
	}
	gender := "M"
	if key%2 == 0 {
		gender = "F"
	}
	return []any{key, day(time.Date(1955, 1, 1, 0, 0, 0, 0, time.UTC), 365*12), string(first), token, gender,
		day(time.Date(1986, 1, 1, 0, 0, 0, 0, time.UTC), 365*12)}
}
