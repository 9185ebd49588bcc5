package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/lock"
	"github.com/shardctl/shardctl/pipeline"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/prune"
	"github.com/shardctl/shardctl/shardmap"
	"github.com/shardctl/shardctl/tables"
	"github.com/shardctl/shardctl/verify"
	"github.com/shardctl/shardctl/watermark"
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
	var shard, chunkRows int
	var against, schema, planRef string
	c := &cobra.Command{
		Use:   "verify (--shard ID --against HOST:PORT [--schema NAME] | --plan PLAN)",
		Short: "Chunked checksums of a shard's rows against a copy on another server",
		Long: `verify compares, chunk by chunk, the rows shard ID owns (per the shard map;
global tables whole) at its location with the same schema (or --schema) on
--against; or, with --plan, a plan's source and target rows (before its
cleanup, or after a move with --keep-source). Each differing chunk is reported
with its primary-key bounds; the exit code is 5 when anything differs. No
replication link is needed; each chunk is one short statement per side.`,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			return a.withStore(cmd, func(s *shardmap.Store) error {
				var src, dst plans.Endpoint
				var ts []tables.Table
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
				case shard > 0 && against != "":
					addr, err := dbutil.ParseAddr(against)
					if err != nil {
						return badInput("--against: %v", err)
					}
					_, loc, owned, err := a.ownedTables(ctx, s, shard)
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
					ts = owned
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
				p := a.newProgress("verify", 0)
				v := &verify.Verifier{Source: sdb, Target: tdb, SourceSchema: src.Schema, TargetSchema: dst.Schema, ChunkRows: chunkRows,
					Progress: func(_ string, n int64) { p.Set(p.done+n, p.done+n, "") }}
				res, err := v.All(ctx, ts)
				p.Finish()
				if err != nil {
					return err
				}
				if err := a.emit(res, func(w io.Writer) {
					fmt.Fprintf(w, "verified %s/%s against %s/%s: %d tables, %d chunks, %d rows\n", src.Addr(), src.Schema, dst.Addr(), dst.Schema, res.Tables, res.Chunks, res.Rows)
					for _, m := range res.Mismatches {
						fmt.Fprintf(w, "  DIFFERS: %s rows %s: %d rows here, %d there\n", m.Table, bounds(m.Lo, m.Hi), m.SourceRows, m.TargetRows)
					}
					if len(res.Mismatches) == 0 {
						fmt.Fprintln(w, "  OK: every chunk matches")
					}
				}); err != nil {
					return err
				}
				if len(res.Mismatches) > 0 {
					return withCode(ExitMismatch, fmt.Errorf("verify: %d chunks differ", len(res.Mismatches)))
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
	return c
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
				db, err := dbutil.Open(ctx, loc.Addr(), a.shardCreds(), "")
				if err != nil {
					return err
				}
				defer db.Close()
				if !dryRun {
					l, err := lock.Acquire(ctx, s.DB, s.Schema, []string{lock.Name(s.Schema, shard)}, lock.Holder(fmt.Sprintf("prune shard %d", shard)))
					if err != nil {
						return a.opError(err, nil)
					}
					defer l.Release()
				}
				thr, err := pipeline.NewThrottler(ctx, db, plans.Options{MaxRate: maxRate, MaxThreadsRunning: maxThreads}, a.shardCreds())
				if err != nil {
					return err
				}
				defer thr.Close()
				pause := plans.Millis(sleepMS).D()
				pr := &prune.Pruner{DB: db, Schema: loc.Schema, ChunkRows: chunkRows,
					Throttle: func(ctx context.Context) error { return thr.Pause(ctx, chunkRows, pause) }}
				type row struct {
					Table       string `json:"table"`
					Rows        int64  `json:"rows"`
					Deleted     int64  `json:"deleted"`
					WouldDelete int64  `json:"would_delete,omitempty"` // dry run: what the run would delete
				}
				if ts, err = prune.Order(ctx, db, loc.Schema, ts); err != nil {
					return err
				}
				var out []row
				var todo []tables.Table
				for _, t := range ts {
					if !t.Sharded {
						continue
					}
					t.Filter.Negate = true
					n, err := pr.Count(ctx, t)
					if err != nil {
						return err
					}
					r := row{Table: t.Name, Rows: n}
					if dryRun {
						r.WouldDelete = n
					} else if n > 0 {
						todo = append(todo, t)
					}
					out = append(out, r)
				}
				if !dryRun {
					// The shard's own triggers must not fire on these deletes;
					// a guarded trigger behaves the same for applications, and
					// one left guarded by a crash reads as its original next time.
					var restore func(context.Context) error
					if restore, err = pipeline.GuardTriggers(ctx, db, loc.Schema, ts); err != nil {
						return err
					}
					defer func() {
						if rerr := restore(context.WithoutCancel(ctx)); rerr != nil && err == nil {
							err = rerr
						}
					}()
					at := plans.Endpoint{ShardID: shard, Host: loc.Host, Port: loc.Port, Schema: loc.Schema}
					perr := pipeline.PruneTables(ctx, s, at, pr, todo, nil, func(table string, w watermark.Mark) error {
						for i := range out {
							if out[i].Table == table {
								out[i].Deleted = w.Rows
							}
						}
						return nil
					})
					if perr != nil {
						return a.opError(perr, nil)
					}
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

// bounds renders a chunk's primary-key range (lo, hi] for people.
func bounds(lo, hi []string) string {
	l, h := "start", "end"
	if lo != nil {
		l = strings.Join(lo, ",")
	}
	if hi != nil {
		h = strings.Join(hi, ",")
	}
	return "(" + l + " .. " + h + "]"
}
