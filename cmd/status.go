package cmd

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/shardmap"
	"github.com/shardctl/shardctl/shardstatus"
)

// ShardStatus is one shard in 'shardctl status' (package shardstatus reads it).
type ShardStatus = shardstatus.Shard

func (a *app) statusCmd() *cobra.Command {
	var exact bool
	c := &cobra.Command{
		Use:   "status",
		Short: "Shards, servers, sizes and mapping states",
		Args:  argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withStore(cmd, func(s *shardmap.Store) error {
				m, err := s.Load(cmd.Context())
				if err != nil {
					return err
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
					fmt.Fprintln(tw, "SHARD\tSERVER\tSCHEMA\tMAPPINGS\tSTATUS\tROWS\tSIZE")
					for _, sh := range out.Shards {
						rows, size := statusFigures(sh)
						if !sh.Reachable {
							rows, size = "?", sh.Error
						}
						fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", sh.ShardID, sh.Server, sh.Schema, orNone(shardmap.Summary(sh.Mappings)), sh.Status, rows, size)
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
	return c
}
