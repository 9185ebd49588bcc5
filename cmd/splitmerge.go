package cmd

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/merge"
	"github.com/shardctl/shardctl/move"
	"github.com/shardctl/shardctl/pipeline"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/split"
)

func (a *app) splitCmd() *cobra.Command {
	var f opFlags
	var shard int
	var at, atHash, to, schema string
	var keys []string
	c := &cobra.Command{
		Use:   "split --shard ID [--at KEY | --at-hash MD5 | --keys K1,K2] --to HOST:PORT",
		Short: "Split a shard: the keys from --at up (or a new hash arc) move to a new shard, online",
		Long: `split moves the upper part of a RANGE shard's range, [--at, high), or for a
HASH shard a new arc of the ring, to a new shard on --to. Only the moving rows
are copied, tailed and fenced: keys that stay remain writable throughout.
Without --at, the key that halves the shard's rows is chosen (shown by --dry-run);
without --at-hash, the midpoint of the shard's arc. A LIST shard (one tenant
per key) splits by a key set: --keys names the tenants that move to the new
shard (the same as 'move --keys ... --to').`,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.validate(cmd); err != nil {
				return err
			}
			if shard <= 0 {
				return badInput("give --shard ID (see 'shardctl shardmap show')")
			}
			if at != "" && atHash != "" || len(keys) > 0 && (at != "" || atHash != "") {
				return badInput("give one of --at (RANGE), --at-hash (HASH) or --keys (LIST)")
			}
			addr, err := dbutil.ParseAddr(to)
			if err != nil {
				return badInput("--to: %v", err)
			}
			return a.planAndLaunch(cmd, &f, func(ctx context.Context, env pipeline.Env, o plans.Options) (*plans.Plan, error) {
				if len(keys) > 0 {
					return move.PlanKeys(ctx, env, move.KeysRequest{ShardID: shard, Keys: keys, To: addr, Schema: schema, Options: o})
				}
				return split.Plan(ctx, env, split.Request{ShardID: shard, At: at, AtHash: atHash, To: addr, Schema: schema, Options: o})
			})
		},
	}
	f.register(c)
	c.Flags().IntVar(&shard, "shard", 0, "shard id to split")
	c.Flags().StringVar(&at, "at", "", "RANGE: first key of the part that moves")
	c.Flags().StringVar(&atHash, "at-hash", "", "HASH: the new ring point (32-digit hex MD5)")
	c.Flags().StringVar(&to, "to", "", "server HOST:PORT of the new shard")
	c.Flags().StringSliceVar(&keys, "keys", nil, "LIST: the keys (tenants) that move to the new shard")
	c.Flags().StringVar(&schema, "schema", "", "schema of the new shard (default: <source schema>_<at>)")
	return c
}

func (a *app) mergeCmd() *cobra.Command {
	var f opFlags
	var shard, into int
	c := &cobra.Command{
		Use:   "merge --shard ID --into ID",
		Short: "Merge a shard into its neighbour, online",
		Long: `merge copies shard --shard's rows into the neighbouring shard --into (adjacent
RANGE mappings, or the previous point on the HASH ring), switches the mapping,
merges the two mappings into one, and removes the emptied shard. It refuses,
changing nothing, when a row would collide with one the neighbour already has.`,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.validate(cmd); err != nil {
				return err
			}
			if shard <= 0 || into <= 0 {
				return badInput("give --shard ID and --into ID")
			}
			return a.planAndLaunch(cmd, &f, func(ctx context.Context, env pipeline.Env, o plans.Options) (*plans.Plan, error) {
				return merge.Plan(ctx, env, merge.Request{ShardID: shard, Into: into, Options: o})
			})
		},
	}
	f.register(c)
	c.Flags().IntVar(&shard, "shard", 0, "the shard that goes away")
	c.Flags().IntVar(&into, "into", 0, "the neighbour that receives its rows")
	return c
}
