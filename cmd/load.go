package cmd

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/load"
	"github.com/shardctl/shardctl/router"
	"github.com/shardctl/shardctl/shardmap"
)

func (a *app) loadCmd() *cobra.Command {
	var groups []string
	var rate, conc int
	var dur, ttl time.Duration
	var ledger, mix string
	var seed int64
	c := &cobra.Command{
		Use:   "load --keys NAME=LO-HI [--keys ...] --ledger FILE",
		Short: "Write through the shard map's router and keep a ledger of every acknowledged write",
		Long: `load inserts, updates and deletes employees rows over the given key ranges,
through the router (offline mappings and moved shards are retried), at a target
rate, and appends every acknowledged write to a ledger. 'shardctl load check
LEDGER' then proves that each written key holds its last acknowledged value at
its current shard and nowhere else (the shards of the employees table's
partition function, and shards with no mappings; another function's shards
are not read). The demo and the tests run it during moves.`,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var gs []load.Group
			for _, g := range groups {
				pg, err := load.ParseGroup(g)
				if err != nil {
					return badInput("--keys: %v", err)
				}
				gs = append(gs, pg)
			}
			if len(gs) == 0 {
				return badInput("give at least one --keys NAME=LO-HI")
			}
			m, err := load.ParseMix(mix)
			if err != nil {
				return badInput("--mix: %v", err)
			}
			if m.Insert+m.Update+m.Delete != 100 {
				return badInput("--mix %s: the insert/update/delete percentages must add up to 100, for example 40/45/15", mix)
			}
			return a.withStore(cmd, func(s *shardmap.Store) error {
				r := router.New(s, router.Options{Creds: a.shardCreds(), TTL: ttl})
				defer r.Close()
				st, err := load.Run(cmd.Context(), load.Config{Router: r, Groups: gs, Rate: rate, Concurrency: conc, Duration: dur, Ledger: ledger, Mix: m, Seed: seed,
					Progress: func(st load.Stats) {
						a.log.Info("load", "elapsed", st.Elapsed.Round(time.Second), "acked", st.Acked, "errors", st.Errors, "retries", st.Retries)
					}})
				var ce *load.ConfigError
				if errors.As(err, &ce) {
					return badInput("%v", ce)
				}
				if err != nil {
					return err
				}
				return a.emit(st, func(w io.Writer) { printLoad(w, st) })
			})
		},
	}
	c.Flags().StringArrayVar(&groups, "keys", nil, "key group NAME=LO-HI (emp_no range [LO, HI)); repeat for several")
	c.Flags().IntVar(&rate, "rate", 300, "acknowledged writes per second, split evenly over the key groups (0: as fast as possible)")
	c.Flags().IntVar(&conc, "concurrency", 8, "writers per key group (three --keys with --concurrency 4 are 12 writers)")
	c.Flags().DurationVar(&dur, "duration", 0, "stop after this long (0: until interrupted)")
	c.Flags().StringVar(&ledger, "ledger", "", "ledger file (JSON lines)")
	c.Flags().StringVar(&mix, "mix", "40/45/15", "insert/update/delete percentages, for example 40/45/15")
	c.Flags().Int64Var(&seed, "seed", 1, "random seed")
	c.Flags().DurationVar(&ttl, "map-ttl", router.DefaultTTL, "how long the router trusts its cached shard map before it checks the map's version (an operation's --route-grace must be longer)")
	check := &cobra.Command{
		Use:   "check LEDGER",
		Short: "Check that every written key holds its last acknowledged write at its current shard, and nowhere else",
		Args:  argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withStore(cmd, func(s *shardmap.Store) error {
				rep, err := load.Check(cmd.Context(), s, a.shardCreds(), args[0])
				if err != nil {
					return err
				}
				if err := a.emit(rep, func(w io.Writer) {
					fmt.Fprintf(w, "ledger %s: %d keys, %d present at their shard, %d absent as expected\n", args[0], rep.Keys, rep.Present, rep.Absent)
					for _, n := range rep.Notes {
						fmt.Fprintln(w, "  note:", n)
					}
					for i, p := range rep.Problems {
						if i == 20 {
							fmt.Fprintf(w, "  ... and %d more problems\n", len(rep.Problems)-20)
							break
						}
						fmt.Fprintln(w, "  PROBLEM:", p)
					}
					if len(rep.Problems) == 0 {
						fmt.Fprintln(w, "  OK: nothing lost, nothing duplicated, nothing left behind")
					}
				}); err != nil {
					return err
				}
				if len(rep.Problems) > 0 {
					return withCode(ExitMismatch, fmt.Errorf("ledger check failed: %d problems", len(rep.Problems)))
				}
				return nil
			})
		},
	}
	c.AddCommand(check)
	return c
}

func printLoad(w io.Writer, st load.Stats) {
	fmt.Fprintf(w, "load: %d writes acknowledged in %s (%.0f/s), %d failed, %d retried\n", st.Acked, st.Elapsed.Round(time.Millisecond),
		float64(st.Acked)/st.Elapsed.Seconds(), st.Errors, st.Retries)
	names := make([]string, 0, len(st.Groups))
	for n := range st.Groups {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		g := st.Groups[n]
		fmt.Fprintf(w, "  %-12s acked %d, errors %d, retries %d, longest gap between successful writes %s\n", n, g.Acked, g.Errors, g.Retries, g.LongestGap.Round(time.Millisecond))
	}
	if st.LastError != "" {
		fmt.Fprintln(w, "  last error:", strings.TrimSpace(st.LastError))
	}
}
