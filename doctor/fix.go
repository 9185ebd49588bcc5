package doctor

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/lock"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/planstore"
	"github.com/shardctl/shardctl/shardmap"
)

// fenceWait bounds each fence statement of a fix, as a cutover's lock wait does.
const fenceWait = 2 * time.Second

// Fix does every fixable finding in order (a shard's fence is lifted before
// its mappings go online: Classify lists them so) and records the outcome
// in each. A shard is repaired under its own lock, after checking again
// that no unfinished plan owns it, so a plan started since Read is never
// undercut.
func Fix(ctx context.Context, env Env, fs []Finding) {
	for i := range fs {
		f := &fs[i]
		if !f.Fixable {
			continue
		}
		var err error
		switch f.Kind {
		case KindFence, KindOffline:
			err = underShardLock(ctx, env, f.ShardID, func() error {
				if f.Kind == KindFence {
					return liftFence(ctx, env, f)
				}
				return putOnline(ctx, env, f.ShardID)
			})
		case KindPlanCopies:
			err = syncCopies(ctx, env, f.plan)
		case KindLockDead, KindLockRow:
			err = clearLock(ctx, env, f)
		}
		if err != nil {
			f.FixError = err.Error()
			continue
		}
		f.Fixed = true
	}
}

// underShardLock runs fn holding shard id's lock, once no unfinished plan
// owns the shard.
func underShardLock(ctx context.Context, env Env, id int, fn func() error) error {
	l, err := lock.Acquire(ctx, env.Store.DB, env.Store.Schema, []string{lock.Name(env.Store.Schema, id)}, lock.Holder("doctor"))
	if err != nil {
		return err
	}
	defer l.Release()
	ps, err := planstore.Unfinished(ctx, env.PlanDir, env.Plans)
	if err != nil {
		return err
	}
	if p, ok := Owners(ps).Shards[id]; ok {
		return fmt.Errorf("shard %d: plan %s owns it now; left to it", id, p)
	}
	return fn()
}

// liftFence drops the fence of the shard's serving copy, after checking the
// map still names that copy as the shard's location.
func liftFence(ctx context.Context, env Env, f *Finding) error {
	m, err := env.Store.Load(ctx)
	if err != nil {
		return err
	}
	l, err := m.Location(f.ShardID)
	if err != nil {
		return err
	}
	if l.Addr().String() != f.Server || l.Schema != f.Schema {
		return fmt.Errorf("shard %d now lives at %s/%s, not %s/%s; left as it is", f.ShardID, l.Addr(), l.Schema, f.Server, f.Schema)
	}
	db, err := dbutil.Open(ctx, l.Addr(), env.Creds, "")
	if err != nil {
		return err
	}
	defer db.Close()
	if err := fence.Remove(ctx, db, l.Schema, f.tables, fenceWait); err != nil {
		return fmt.Errorf("shard %d: %w", f.ShardID, err)
	}
	return nil
}

// putOnline puts shard id's offline mappings online.
func putOnline(ctx context.Context, env Env, id int) error {
	m, err := env.Store.Load(ctx)
	if err != nil {
		return err
	}
	var cs []shardmap.Change
	for _, mp := range m.ShardMappings(id) {
		if mp.Status == shardmap.Offline {
			cs = append(cs, shardmap.Change{Op: shardmap.OpSetStatus, Ref: mp.Ref(), Status: shardmap.Online})
		}
	}
	if len(cs) == 0 {
		return nil
	}
	return env.Store.Apply(ctx, fmt.Sprintf("doctor: shard %d online", id), cs)
}

// syncCopies writes the later copy of a plan over the earlier one. Both
// are the same plan: every command already reads the later, so nothing is
// lost. The copy is written as it is, revision included, so the two agree
// afterwards and the next doctor finds nothing (a save would give the file
// a revision of its own, a fresh disagreement). Two copies of one revision
// that differ get the later one saved as a new revision in both.
func syncCopies(ctx context.Context, env Env, pf *PlanFacts) error {
	if pf == nil || pf.File == nil {
		return errors.New("no plan file")
	}
	switch {
	case pf.Row == nil || pf.File.Revision > pf.Row.Revision:
		return env.Plans.Put(ctx, pf.File)
	case pf.Row.Revision > pf.File.Revision:
		return plans.Write(pf.Path, pf.Row)
	}
	later := pf.File
	if planLater(pf.Row, pf.File) {
		later = pf.Row
	}
	if err := plans.Save(pf.Path, later); err != nil {
		return err
	}
	return env.Plans.Put(ctx, later)
}

// clearLock ends the session of a lock whose process is gone (the server
// then frees the lock) and deletes the lock's row, only while it still
// names that session.
func clearLock(ctx context.Context, env Env, f *Finding) error {
	db := env.Store.DB
	if f.Kind == KindLockDead {
		// KILL takes no placeholder; the id is the server's own number.
		if _, err := db.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", f.lock.ConnID)); err != nil && dbutil.ErrNumber(err) != 1094 { // 1094: no such thread (gone already)
			return fmt.Errorf("lock %s: end session %d: %w", f.lock.Name, f.lock.ConnID, err)
		}
		// The server frees a killed session's locks as the session ends.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			var used sql.NullInt64
			if err := db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", f.lock.Name).Scan(&used); err != nil {
				return fmt.Errorf("lock %s: %w", f.lock.Name, err)
			}
			if !used.Valid || used.Int64 != f.lock.ConnID {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("lock %s: session %d still holds it after KILL", f.lock.Name, f.lock.ConnID)
			}
		}
	}
	_, err := db.ExecContext(ctx, "DELETE FROM "+dbutil.Table(env.Store.Schema, "locks")+" WHERE name = ? AND connection_id = ? AND (IS_USED_LOCK(name) IS NULL OR IS_USED_LOCK(name) <> connection_id)",
		f.lock.Name, f.lock.ConnID)
	if err != nil {
		return fmt.Errorf("lock %s: delete its row: %w", f.lock.Name, err)
	}
	return nil
}
