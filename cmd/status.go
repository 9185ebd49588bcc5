package cmd

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/shardmap"
	"github.com/shardctl/shardctl/shardstatus"
)

// ShardStatus is one shard in 'shardctl status' (package shardstatus reads it).
type ShardStatus = shardstatus.Shard

func (a *app) statusCmd() *cobra.Command {
	var exact bool
	var keys []string
	var top int
	var fn string
	c := &cobra.Command{
		Use:   "status [--keys K1,K2 | --top N]",
		Short: "Shards, servers, sizes and mapping states; or the rows of some keys (tenants)",
		Long: `status lists every shard with its server, mappings, state, rows and size.

--keys K1,K2 shows instead the rows of those keys (tenants) over their
function's sharded tables, with the shard and server that hold them (one
index read per key and table); --function names the function when the map
has more than one. --top N shows the N keys with the most rows of each LIST
function over the fleet (each shard's tables read by GROUP BY over the shard
column, 50,000 keys per statement).`,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case len(keys) > 0 && cmd.Flags().Changed("top"):
				return badInput("give --keys or --top, not both")
			case cmd.Flags().Changed("top") && top <= 0:
				return badInput("--top %d: give how many of the biggest tenants to show, 1 or more", top)
			case fn != "" && len(keys) == 0:
				return badInput("--function names the function of --keys; give --keys K1,K2")
			}
			return a.withStore(cmd, func(s *shardmap.Store) error {
				m, err := s.Load(cmd.Context())
				if err != nil {
					return err
				}
				if len(keys) > 0 || top > 0 {
					return a.keyStatus(cmd.Context(), m, keys, fn, top)
				}
				out := struct {
					Version int64          `json:"version"`
					Shards  []ShardStatus  `json:"shards"`
					Windows []WindowStatus `json:"windows,omitempty"`
				}{Version: m.Version, Windows: a.windows()}
				out.Shards = shardstatus.ReadAll(cmd.Context(), m, m.Locations, a.shardCreds(), exact)
				return a.emit(out, func(w io.Writer) {
					fmt.Fprintf(w, "shard map version %d\n", m.Version)
					tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "SHARD\tSERVER\tSCHEMA\tMAPPINGS\tSTATUS\tPOLICY\tROWS\tSIZE")
					for _, sh := range out.Shards {
						rows, size := statusFigures(sh)
						if !sh.Reachable {
							rows, size = "?", sh.Error
						}
						fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sh.ShardID, sh.Server, sh.Schema, orNone(shardmap.Summary(sh.Mappings)), sh.Status, policyName(sh.Dedicated), rows, size)
					}
					tw.Flush()
					if note := estimateNote(out.Shards); note != "" {
						fmt.Fprintln(w, note)
					}
					printWindows(w, out.Windows)
				})
			})
		},
	}
	c.Flags().BoolVar(&exact, "exact", false, "count rows exactly (COUNT(*) per sharded table) instead of estimates")
	c.Flags().StringSliceVar(&keys, "keys", nil, "show the rows of these keys (tenants), with their shard and server")
	c.Flags().StringVar(&fn, "function", "", "the partition function of --keys (when the map has more than one)")
	c.Flags().IntVar(&top, "top", 0, "show the N keys (tenants) with the most rows of each LIST function")
	return c
}

// keyStatus is 'status --keys' or '--top': rows per key, counted.
func (a *app) keyStatus(ctx context.Context, m *shardmap.Map, keys []string, fn string, top int) error {
	out := struct {
		Version int64                 `json:"version"`
		Keys    []shardstatus.KeyRows `json:"keys"`
	}{Version: m.Version}
	var err error
	if top > 0 {
		lists := 0
		for _, f := range m.Functions {
			if f.Type == shardmap.List {
				lists++
			}
		}
		if lists == 0 {
			return badInput("--top ranks the tenants of LIST functions, and this shard map has none: give --keys K1,K2 to count keys of %s", functionNames(m))
		}
		if out.Keys, err = shardstatus.Top(ctx, m, top, a.shardCreds()); err != nil {
			return err
		}
	} else {
		var f shardmap.Function
		switch {
		case fn != "":
			if f, err = m.Function(fn); err != nil {
				return err
			}
		case len(m.Functions) == 1:
			f = m.Functions[0]
		default:
			return badInput("the shard map has %d partition functions (%s): name the keys' one with --function NAME", len(m.Functions), functionNames(m))
		}
		if out.Keys, err = shardstatus.Keys(ctx, m, f, keys, a.shardCreds()); err != nil {
			return err
		}
	}
	if out.Keys == nil {
		out.Keys = []shardstatus.KeyRows{}
	}
	return a.emit(out, func(w io.Writer) {
		fmt.Fprintf(w, "shard map version %d\n", m.Version)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "FUNCTION\tKEY\tROWS\tSHARD\tSERVER\tSCHEMA\tSTATUS")
		for _, k := range out.Keys {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", k.Function, k.Key, k.Rows, k.ShardID, k.Server, k.Schema, k.Status)
		}
		tw.Flush()
	})
}

func functionNames(m *shardmap.Map) string {
	var names []string
	for _, f := range m.Functions {
		names = append(names, f.Name)
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
