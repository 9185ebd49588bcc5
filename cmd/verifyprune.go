package cmd

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/pipeline"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
	"github.com/shardctl/shardctl/verify"
)

func (a *app) verifyCmd() *cobra.Command {
	var shard, chunkRows, maxRows, threads int
	var against, schema, planRef string
	var repair, resume, yes bool
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
			req := pipeline.VerifyRequest{Shard: shard, Schema: schema, PlanRef: planRef, PlanDir: a.planDir(),
				ChunkRows: chunkRows, MaxRows: maxRows, Threads: threads, Repair: repair, Resume: resume}
			if planRef == "" && shard > 0 && against != "" {
				addr, err := dbutil.ParseAddr(against)
				if err != nil {
					return badInput("--against: %v", err)
				}
				req.Against = addr
			}
			return a.withStore(cmd, func(s *shardmap.Store) error {
				p := a.newProgress("verify", 0)
				req.Progress = func(n int64) { p.Set(p.done+n, p.done+n, "") }
				req.Compared = p.Finish
				out, err := pipeline.Verify(cmd.Context(), a.env(s), req)
				if err != nil {
					return a.opError(err, nil)
				}
				if err := a.emit(out, func(w io.Writer) { verifyText(w, out) }); err != nil {
					return err
				}
				if n := out.Differing(); n > 0 {
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
	c.Flags().IntVar(&threads, "threads", plans.DefaultOptions().VerifyThreads, "chunks compared at once, each on its own session on each side")
	c.Flags().IntVar(&maxRows, "max-rows", 100, "differing rows listed per chunk (0: name chunks only)")
	c.Flags().BoolVar(&resume, "resume", false, "continue an interrupted verify of the same comparison from its last checkpoint")
	c.Flags().BoolVar(&repair, "repair", false, "make the copy match the serving side for the rows that differ, then verify again")
	asks(c, &yes) // a repair writes only the copy, from the side that serves: nothing to ask
	return c
}

// verifyText renders a verify's report: the comparison, and with --repair
// what was repaired and the comparison after it.
func verifyText(w io.Writer, r pipeline.VerifyReport) {
	src, dst := r.Source, r.Copy
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
	var dryRun, yes bool
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
				_, loc, ts, err := pipeline.OwnedTables(ctx, a.env(s), shard)
				if err != nil {
					return err
				}
				at := plans.Endpoint{ShardID: shard, Host: loc.Host, Port: loc.Port, Schema: loc.Schema}
				if !dryRun {
					if err := a.confirm(yes, nil, fmt.Sprintf("delete the rows shard %d (%s/%s) holds but does not own?", shard, loc.Addr(), loc.Schema)); err != nil {
						return err
					}
				}
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
	asks(c, &yes)
	c.Flags().IntVar(&chunkRows, "chunk-rows", 1000, "rows per DELETE")
	c.Flags().Int64Var(&maxRate, "max-rate", 0, "rows per second at most (0: no limit)")
	c.Flags().IntVar(&sleepMS, "sleep-ms", 0, "pause between chunks")
	c.Flags().IntVar(&maxThreads, "max-threads-running", 0, "pause while the server's Threads_running is above this (0: off)")
	return c
}
