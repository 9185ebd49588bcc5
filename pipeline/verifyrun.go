package pipeline

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/fault"
	"github.com/shardctl/shardctl/lock"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
	"github.com/shardctl/shardctl/tables"
	"github.com/shardctl/shardctl/verify"
)

// CheckCopy refuses (shardmap.ErrBadInput) to verify against `at` when the
// schema, or one of the tables ts the serving side has, is not there: the
// operator named the wrong server or schema for the copy, which is input to
// fix, not a failure to retry or a difference to repair.
func CheckCopy(ctx context.Context, db *sql.DB, at plans.Endpoint, ts []tables.Table) error {
	have := map[string]bool{}
	switch ok, err := dbutil.SchemaExists(ctx, db, at.Schema); {
	case err != nil:
		return fmt.Errorf("verify: look for schema %s on %s: %w", at.Schema, at.Addr(), err)
	case !ok:
		return refusef("schema %s does not exist on %s: give --against the server that holds the copy (and --schema its name, when it differs from the shard's)", at.Schema, at.Addr())
	}
	var name string
	if err := dbutil.ScanEach(ctx, db, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?", []any{at.Schema}, []any{&name},
		func() error { have[name] = true; return nil }); err != nil {
		return fmt.Errorf("verify: list the tables of %s on %s: %w", at.Schema, at.Addr(), err)
	}
	var missing []string
	for _, t := range ts {
		if !have[t.Name] {
			missing = append(missing, t.Name)
		}
	}
	if len(missing) > 0 {
		return refusef("schema %s on %s lacks the shard's tables %s: give --against (and --schema) the copy of the shard, or create the tables there", at.Schema, at.Addr(), strings.Join(missing, ", "))
	}
	return nil
}

// OwnedTables returns shard id's tables with filters selecting the rows it
// owns (sharded tables) or every row (global tables), with the map and the
// shard's location they were read from.
func OwnedTables(ctx context.Context, env Env, id int) (*shardmap.Map, shardmap.Location, []tables.Table, error) {
	m, err := env.Store.Load(ctx)
	if err != nil {
		return nil, shardmap.Location{}, nil, err
	}
	loc, err := m.Location(id)
	if err != nil {
		return nil, loc, nil, err
	}
	ts, err := Inspect(ctx, env, m, loc)
	if err != nil {
		return nil, loc, nil, err
	}
	for i, t := range ts {
		if t.Sharded {
			f, _, _ := m.TableFunction(t.Name)
			ts[i].Filter = m.Owned(f, id, t.ShardColumn)
		}
	}
	return m, loc, ts, nil
}

// VerifyRequest is what 'shardctl verify' compares: shard Shard's rows at
// its location against a copy on Against (schema Schema, default the
// shard's), or a plan's two sides (PlanRef, resolved in PlanDir).
type VerifyRequest struct {
	Shard   int
	Against dbutil.Addr
	Schema  string
	PlanRef string
	PlanDir string // the plan directory, where the checkpoint is kept too
	// ChunkRows per chunk; MaxRows differing rows named per chunk (0: chunks
	// only); Threads chunks compared at once (0: verify's default).
	ChunkRows, MaxRows, Threads int
	Repair                      bool             // make the copy match the serving side, then compare again
	Resume                      bool             // continue from the checkpoint of the same comparison
	Progress                    func(rows int64) // optional: the source rows of each chunk compared
	Compared                    func()           // optional: the first comparison ended
}

// VerifyReport is what a verify found: the comparison, where a --resume
// continued from, and with Repair what was repaired and the comparison
// after it.
type VerifyReport struct {
	verify.Result
	Resumed  string           `json:"resumed,omitempty"`
	Repaired *verify.Repaired `json:"repaired,omitempty"`
	After    *verify.Result   `json:"after_repair,omitempty"`
	// The serving side and the copy, as compared.
	Source plans.Endpoint `json:"-"`
	Copy   plans.Endpoint `json:"-"`
}

// Differing counts the chunks that still differ.
func (r VerifyReport) Differing() int {
	if r.After != nil {
		return len(r.After.Mismatches)
	}
	return len(r.Mismatches)
}

// inputError marks err as input to fix (shardmap.ErrBadInput: exit 2,
// nothing was changed), its message as it is.
type inputError struct{ err error }

func (e inputError) Error() string   { return e.err.Error() }
func (e inputError) Unwrap() []error { return []error{shardmap.ErrBadInput, e.err} }

func inputErr(err error) error { return inputError{err} }

func refusef(format string, a ...any) error { return inputError{fmt.Errorf(format, a...)} }

// Verify is what 'shardctl verify' does: resolve the two sides (the shard
// map decides which serves), take the operation lock when it repairs,
// compare with a checkpoint it can resume from, and repair the copy. Input
// to fix is refused with shardmap.ErrBadInput (or ErrRefused) before
// anything is compared.
// Long on purpose: resolve, lock, checkpoint and repair share the two
// endpoints and the lock, in the order an operator reads them in its log.
func Verify(ctx context.Context, env Env, req VerifyRequest) (VerifyReport, error) {
	var out VerifyReport
	s := env.Store
	var src, dst plans.Endpoint
	var ts []tables.Table
	var locks []string
	var holder string
	switch {
	case req.PlanRef != "":
		p, err := plans.Load(plans.Resolve(req.PlanDir, req.PlanRef))
		if errors.Is(err, os.ErrNotExist) {
			return out, refusef("no plan %q (see 'shardctl plan list')", req.PlanRef)
		}
		if err != nil {
			return out, inputErr(err)
		}
		src, dst, ts = p.Source, p.Target, p.Copy
		if Serving(p) == plans.SideTarget {
			src, dst = dst, src
		}
		if req.Repair {
			m, err := s.Load(ctx)
			if err != nil {
				return out, err
			}
			if err := CheckServing(m, src); err != nil {
				return out, err
			}
		}
		locks, holder = p.Locks, p.ID+" (verify --repair)"
	case req.Shard > 0 && req.Against != (dbutil.Addr{}):
		m, loc, owned, err := OwnedTables(ctx, env, req.Shard)
		if err != nil {
			return out, err
		}
		src = plans.Endpoint{ShardID: req.Shard, Host: loc.Host, Port: loc.Port, Schema: loc.Schema}
		dst = plans.Endpoint{Host: req.Against.Host, Port: req.Against.Port, Schema: loc.Schema}
		if req.Schema != "" {
			dst.Schema = req.Schema
		}
		if req.Against == loc.Addr() && dst.Schema == src.Schema {
			return out, refusef("--against %s is shard %d's own location (%s/%s): a shard always matches itself; give the server (and --schema) of the copy", req.Against, req.Shard, loc.Addr(), loc.Schema)
		}
		if req.Repair {
			if err := CheckRepairable(m, dst); err != nil {
				return out, inputErr(err)
			}
		}
		ts = owned
		locks, holder = []string{lock.Name(s.Schema, req.Shard)}, fmt.Sprintf("verify --repair shard %d", req.Shard)
	default:
		return out, refusef("give --shard ID with --against HOST:PORT, or --plan PLAN")
	}
	out.Source, out.Copy = src, dst
	sdb, err := dbutil.Open(ctx, dbutil.Addr{Host: src.Host, Port: src.Port}, env.Creds, "")
	if err != nil {
		return out, inputErr(err) // nothing was read: an address or account to fix
	}
	defer sdb.Close()
	tdb, err := dbutil.Open(ctx, dbutil.Addr{Host: dst.Host, Port: dst.Port}, env.Creds, "")
	if err != nil {
		return out, inputErr(err)
	}
	defer tdb.Close()
	if req.PlanRef == "" {
		if err := CheckCopy(ctx, tdb, dst, ts); err != nil {
			return out, err
		}
	}
	if req.Repair {
		l, err := lock.Acquire(ctx, s.DB, s.Schema, locks, lock.Holder(holder))
		if err != nil {
			return out, err
		}
		defer l.Release()
	}
	v := &verify.Verifier{Source: sdb, Target: tdb, SourceSchema: src.Schema, TargetSchema: dst.Schema, ChunkRows: req.ChunkRows,
		Threads: req.Threads, Narrow: req.MaxRows > 0, MaxRows: req.MaxRows,
		Progress: func(_ string, n int64) {
			if req.Progress != nil {
				req.Progress(n)
			}
		}}
	// The checkpoint is named by what is compared, so another comparison
	// never continues it.
	key := fmt.Sprintf("%s/%s against %s/%s, shard %d, plan %q, chunk rows %d", src.Addr(), src.Schema, dst.Addr(), dst.Schema, req.Shard, req.PlanRef, req.ChunkRows)
	sum := sha256.Sum256([]byte(key))
	ckpt := filepath.Join(req.PlanDir, "verify-"+hex.EncodeToString(sum[:6])+".checkpoint")
	if req.Resume {
		from, ok, err := verify.LoadCheckpoint(ckpt, key)
		if err != nil {
			return out, inputErr(err)
		}
		if ok {
			v.From = from
			out.Resumed = fmt.Sprintf("%d tables done, %s from key %s", len(from.Done), from.Table, strings.Join(from.After, ","))
		}
	}
	var saved time.Time
	v.Checkpoint = func(cp verify.Checkpoint) error {
		// At most once a second: a resume repeats at most a second's
		// chunks, and a fast verify does not wait on fsync.
		if time.Since(saved) < time.Second {
			return nil
		}
		cp.Key = key
		if err := verify.SaveCheckpoint(ckpt, cp); err != nil {
			return err
		}
		saved = time.Now()
		fault.Hit("verify:chunk") // tests: a verify killed part-way
		return nil
	}
	res, err := v.All(ctx, ts)
	if req.Compared != nil {
		req.Compared()
	}
	if err != nil {
		return out, err
	}
	_ = os.Remove(ckpt) // the comparison ran to its end
	out.Result = res
	if req.Repair && len(res.Mismatches) > 0 {
		done, again, err := Repair(ctx, v, ts, res)
		if err != nil {
			return out, err
		}
		out.Repaired, out.After = &done, &again
	}
	return out, nil
}
