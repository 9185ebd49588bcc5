package cmd

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/fault"
	"github.com/shardctl/shardctl/lock"
	"github.com/shardctl/shardctl/pipeline"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
	"github.com/shardctl/shardctl/tables"
	"github.com/shardctl/shardctl/verify"
)

// ownedTables returns shard id's tables with filters selecting the rows it
// owns (sharded tables) or every row (global tables).
func (a *app) ownedTables(ctx context.Context, s *shardmap.Store, id int) (*shardmap.Map, shardmap.Location, []tables.Table, error) {
	m, err := s.Load(ctx)
	if err != nil {
		return nil, shardmap.Location{}, nil, err
	}
	loc, err := m.Location(id)
	if err != nil {
		return nil, loc, nil, err
	}
	ts, err := pipeline.Inspect(ctx, a.env(s), m, loc)
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

func (a *app) verifyCmd() *cobra.Command {
	var shard, chunkRows, maxRows int
	var against, schema, planRef string
	var repair, resume bool
	c := &cobra.Command{
		Use:   "verify (--shard ID --against HOST:PORT [--schema NAME] | --plan PLAN) [--repair] [--resume]",
		Short: "Chunked checksums of a shard's rows against a copy on another server; names and repairs the rows that differ",
		Long: `verify compares, chunk by chunk, the rows shard ID owns (per the shard map;
global tables whole) at its location with the same schema (or --schema) on
--against; or, with --plan, a plan's source and target rows (before its
cleanup, or after a move with --keep-source). Each differing chunk is reported
with its primary-key bounds and the rows in it that differ (keys on one side
only, keys whose values differ with the columns that do; --max-rows per
chunk); the exit code is 5 when anything differs. No replication link is
needed; each chunk is one short statement per side.

--repair makes the copy match the serving side for the rows that differ,
then verifies again (exit 0 when it then matches). The shard map decides
which side serves: the shard's location (--shard), or for --plan the source
until cutover and the target after it. The copy's triggers do not fire on
the repair's writes, foreign keys are not checked (rows arrive as the serving
side has them), and it holds the shard's (or the plan's) operation lock, so
it waits for no running operation: a plan that is running refuses it (exit 4).

A verify saves its progress as it goes (a checkpoint file beside the plans,
at most once a second); --resume continues an interrupted one from there
instead of starting over. A verify that ran to its end removes its checkpoint.`,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			return a.withStore(cmd, func(s *shardmap.Store) error {
				var src, dst plans.Endpoint
				var ts []tables.Table
				var locks []string
				var holder string
				switch {
				case planRef != "":
					p, err := plans.Load(plans.Resolve(a.planDir(), planRef))
					if errors.Is(err, os.ErrNotExist) {
						return badInput("no plan %q (see 'shardctl plan list')", planRef)
					}
					if err != nil {
						return withCode(ExitBadInput, err)
					}
					src, dst, ts = p.Source, p.Target, p.Copy
					if pipeline.Serving(p) == plans.SideTarget {
						src, dst = dst, src
					}
					if repair {
						m, err := s.Load(ctx)
						if err != nil {
							return err
						}
						if err := pipeline.CheckServing(m, src); err != nil {
							return withCode(ExitBadInput, err)
						}
					}
					locks, holder = p.Locks, p.ID+" (verify --repair)"
				case shard > 0 && against != "":
					addr, err := dbutil.ParseAddr(against)
					if err != nil {
						return badInput("--against: %v", err)
					}
					m, loc, owned, err := a.ownedTables(ctx, s, shard)
					if err != nil {
						return err
					}
					src = plans.Endpoint{ShardID: shard, Host: loc.Host, Port: loc.Port, Schema: loc.Schema}
					dst = plans.Endpoint{Host: addr.Host, Port: addr.Port, Schema: loc.Schema}
					if schema != "" {
						dst.Schema = schema
					}
					if addr == loc.Addr() && dst.Schema == src.Schema {
						return badInput("--against %s is shard %d's own location (%s/%s): a shard always matches itself; give the server (and --schema) of the copy", against, shard, loc.Addr(), loc.Schema)
					}
					if repair {
						if err := pipeline.CheckRepairable(m, dst); err != nil {
							return withCode(ExitBadInput, err)
						}
					}
					ts = owned
					locks, holder = []string{lock.Name(s.Schema, shard)}, fmt.Sprintf("verify --repair shard %d", shard)
				default:
					return badInput("give --shard ID with --against HOST:PORT, or --plan PLAN")
				}
				sdb, err := dbutil.Open(ctx, dbutil.Addr{Host: src.Host, Port: src.Port}, a.shardCreds(), "")
				if err != nil {
					return withCode(ExitBadInput, err) // nothing was read: an address or account to fix
				}
				defer sdb.Close()
				tdb, err := dbutil.Open(ctx, dbutil.Addr{Host: dst.Host, Port: dst.Port}, a.shardCreds(), "")
				if err != nil {
					return withCode(ExitBadInput, err)
				}
				defer tdb.Close()
				if planRef == "" {
					if err := pipeline.CheckCopy(ctx, tdb, dst, ts); err != nil {
						return err
					}
				}
				if repair {
					l, err := lock.Acquire(ctx, s.DB, s.Schema, locks, lock.Holder(holder))
					if err != nil {
						return a.opError(err, nil)
					}
					defer l.Release()
				}
				p := a.newProgress("verify", 0)
				v := &verify.Verifier{Source: sdb, Target: tdb, SourceSchema: src.Schema, TargetSchema: dst.Schema, ChunkRows: chunkRows,
					Narrow: maxRows > 0, MaxRows: maxRows,
					Progress: func(_ string, n int64) { p.Set(p.done+n, p.done+n, "") }}
				// The checkpoint is named by what is compared, so another
				// comparison never continues it.
				key := fmt.Sprintf("%s/%s against %s/%s, shard %d, plan %q, chunk rows %d", src.Addr(), src.Schema, dst.Addr(), dst.Schema, shard, planRef, chunkRows)
				sum := sha256.Sum256([]byte(key))
				ckpt := filepath.Join(a.planDir(), "verify-"+hex.EncodeToString(sum[:6])+".checkpoint")
				var out verifyReport
				if resume {
					from, ok, err := verify.LoadCheckpoint(ckpt, key)
					if err != nil {
						return withCode(ExitBadInput, err)
					}
					if ok {
						v.From = from
						out.Resumed = fmt.Sprintf("%d tables done, %s from key %s", len(from.Done), from.Table, strings.Join(from.After, ","))
					}
				}
				var saved time.Time
				v.Checkpoint = func(cp verify.Checkpoint) error {
					// At most once a second: a resume repeats at most a
					// second's chunks, and a fast verify does not wait on fsync.
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
				p.Finish()
				if err != nil {
					return err
				}
				_ = os.Remove(ckpt) // the comparison ran to its end
				out.Result = res
				if repair && len(res.Mismatches) > 0 {
					done, again, err := pipeline.Repair(ctx, v, ts, res)
					if err != nil {
						return a.opError(err, nil)
					}
					out.Repaired, out.After = &done, &again
				}
				if err := a.emit(out, func(w io.Writer) { out.text(w, src, dst) }); err != nil {
					return err
				}
				if n := out.differing(); n > 0 {
					return withCode(ExitMismatch, fmt.Errorf("verify: %d chunks differ", n))
				}
				return nil
			})
		},
	}
	c.Flags().IntVar(&shard, "shard", 0, "shard id")
	c.Flags().StringVar(&against, "against", "", "server HOST:PORT holding the copy")
	c.Flags().StringVar(&schema, "schema", "", "schema of the copy (default: the shard's schema name)")
	c.Flags().StringVar(&planRef, "plan", "", "verify a plan's source against its target")
	c.Flags().IntVar(&chunkRows, "chunk-rows", 5000, "rows per chunk")
	c.Flags().IntVar(&maxRows, "max-rows", 100, "differing rows listed per chunk (0: name chunks only)")
	c.Flags().BoolVar(&resume, "resume", false, "continue an interrupted verify of the same comparison from its last checkpoint")
	c.Flags().BoolVar(&repair, "repair", false, "make the copy match the serving side for the rows that differ, then verify again")
	return c
}

// verifyReport is what verify prints: the comparison, and with --repair
// what was repaired and the comparison after it.
type verifyReport struct {
	verify.Result
	Resumed  string           `json:"resumed,omitempty"` // where a --resume continued from
	Repaired *verify.Repaired `json:"repaired,omitempty"`
	After    *verify.Result   `json:"after_repair,omitempty"`
}

// differing counts the chunks that still differ.
func (r verifyReport) differing() int {
	if r.After != nil {
		return len(r.After.Mismatches)
	}
	return len(r.Mismatches)
}

func (r verifyReport) text(w io.Writer, src, dst plans.Endpoint) {
	here, there := "source "+src.Addr()+"/"+src.Schema, "copy "+dst.Addr()+"/"+dst.Schema
	result := func(res verify.Result) {
		for _, m := range res.Mismatches {
			fmt.Fprintf(w, "  DIFFERS: %s rows %s: %d rows here, %d there\n", m.Table, m.Bounds(), m.SourceRows, m.TargetRows)
			for _, d := range m.Rows {
				fmt.Fprintf(w, "    %s\n", d.Describe(m.KeyColumns, "source", "copy"))
			}
			if m.MoreRows > 0 {
				fmt.Fprintf(w, "    and %d more rows (--max-rows)\n", m.MoreRows)
			}
		}
		if len(res.Mismatches) == 0 {
			fmt.Fprintln(w, "  OK: every chunk matches")
		}
	}
	if r.Resumed != "" {
		fmt.Fprintf(w, "resumed from the checkpoint (%s)\n", r.Resumed)
	}
	fmt.Fprintf(w, "verified %s against %s: %d tables, %d chunks, %d rows\n", here, there, r.Tables, r.Chunks, r.Rows)
	result(r.Result)
	if r.Repaired != nil {
		fmt.Fprintf(w, "repaired the %s: %d rows written, %d deleted\n", there, r.Repaired.Written, r.Repaired.Deleted)
		fmt.Fprintf(w, "verified again: %d tables, %d chunks, %d rows\n", r.After.Tables, r.After.Chunks, r.After.Rows)
		result(*r.After)
	}
}

func (a *app) pruneCmd() *cobra.Command {
	var shard, chunkRows, sleepMS, maxThreads int
	var maxRate int64
	var dryRun bool
	c := &cobra.Command{
		Use:   "prune --shard ID [--dry-run]",
		Short: "Delete the rows a shard holds but no longer owns, in chunks",
		Long: `prune deletes, from each sharded table of shard ID, the rows whose key the
shard map gives to another shard (MySQL Fabric's prune_shard): chunked
DELETE ... LIMIT-sized statements bounded by primary-key ranges, throttled with
--max-rate or --sleep-ms. It holds the shard's operation lock. Running it again
continues where it stopped (deleted rows stay deleted). --dry-run counts per
table and changes nothing.`,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if shard <= 0 {
				return badInput("give --shard ID")
			}
			return a.withStore(cmd, func(s *shardmap.Store) (err error) {
				_, loc, ts, err := a.ownedTables(ctx, s, shard)
				if err != nil {
					return err
				}
				at := plans.Endpoint{ShardID: shard, Host: loc.Host, Port: loc.Port, Schema: loc.Schema}
				out, err := pipeline.PruneShard(ctx, s, a.shardCreds(), at, ts, pipeline.PruneOptions{
					DryRun: dryRun, ChunkRows: chunkRows, SleepMS: sleepMS, MaxThreadsRunning: maxThreads, MaxRate: maxRate})
				if err != nil {
					return a.opError(err, nil)
				}
				return a.emit(out, func(w io.Writer) {
					verb := "deleted"
					if dryRun {
						verb = "would delete (dry run: nothing changed)"
					}
					fmt.Fprintf(w, "shard %d (%s/%s): rows it holds but does not own\n", shard, loc.Addr(), loc.Schema)
					tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
					fmt.Fprintf(tw, "  TABLE\tNOT OWNED\t%s\n", verb)
					for _, r := range out {
						fmt.Fprintf(tw, "  %s\t%d\t%d\n", r.Table, r.Rows, r.Deleted+r.WouldDelete)
					}
					tw.Flush()
				})
			})
		},
	}
	c.Flags().IntVar(&shard, "shard", 0, "shard id")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "count the rows per table and change nothing")
	c.Flags().IntVar(&chunkRows, "chunk-rows", 1000, "rows per DELETE")
	c.Flags().Int64Var(&maxRate, "max-rate", 0, "rows per second at most (0: no limit)")
	c.Flags().IntVar(&sleepMS, "sleep-ms", 0, "pause between chunks")
	c.Flags().IntVar(&maxThreads, "max-threads-running", 0, "pause while the server's Threads_running is above this (0: off)")
	return c
}
