package cmd

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/shardmap"
)

// ShardStatus is one shard in 'shardctl status'.
type ShardStatus struct {
	ShardID   int                `json:"shard_id"`
	Server    string             `json:"server"`
	Schema    string             `json:"schema"`
	Mappings  []shardmap.Mapping `json:"mappings"`
	Status    string             `json:"status"`    // online, offline, partial (some mappings offline), unmapped
	Rows      int64              `json:"rows"`      // rows of the sharded tables (exact with --exact, else estimates)
	RowsKind  string             `json:"rows_kind"` // exact (COUNT(*)) or estimate (table statistics)
	Bytes     int64              `json:"bytes"`     // size of the whole schema
	SizeKind  string             `json:"size_kind"` // tablespace (InnoDB file sizes, current) or estimate (table statistics)
	Reachable bool               `json:"reachable"`
	Error     string             `json:"error,omitempty"`
}

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
				for _, l := range m.Locations {
					out.Shards = append(out.Shards, a.shardStatus(cmd.Context(), m, l, exact))
				}
				return a.emit(out, func(w io.Writer) {
					fmt.Fprintf(w, "shard map version %d\n", m.Version)
					tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "SHARD\tSERVER\tSCHEMA\tMAPPINGS\tSTATUS\tROWS\tSIZE")
					for _, sh := range out.Shards {
						var ms []string
						for _, mp := range sh.Mappings {
							ms = append(ms, mp.String())
						}
						rows, size := statusFigures(sh)
						if !sh.Reachable {
							rows, size = "?", sh.Error
						}
						fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", sh.ShardID, sh.Server, sh.Schema, orNone(strings.Join(ms, " ")), sh.Status, rows, size)
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

func (a *app) shardStatus(ctx context.Context, m *shardmap.Map, l shardmap.Location, exact bool) ShardStatus {
	st := ShardStatus{ShardID: l.ShardID, Server: l.Addr().String(), Schema: l.Schema, Mappings: m.ShardMappings(l.ShardID)}
	st.Status = "unmapped"
	for i, mp := range st.Mappings {
		switch {
		case i == 0:
			st.Status = mp.Status
		case st.Status != mp.Status:
			st.Status = "partial"
		}
	}
	db, err := dbutil.Open(ctx, l.Addr(), a.shardCreds(), "")
	if err != nil {
		st.Error = "unreachable"
		return st
	}
	defer db.Close()
	st.Reachable = true
	sharded := map[string]bool{}
	for _, c := range m.Columns {
		sharded[c.Table] = true
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		st.Error = err.Error()
		return st
	}
	defer conn.Close()
	freshStatistics(ctx, conn)
	rows, err := conn.QueryContext(ctx, "SELECT TABLE_NAME, COALESCE(TABLE_ROWS,0), COALESCE(DATA_LENGTH,0)+COALESCE(INDEX_LENGTH,0) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_TYPE = 'BASE TABLE'", l.Schema)
	if err != nil {
		st.Error = err.Error()
		return st
	}
	var tables []string
	all := 0
	for rows.Next() {
		var name string
		var n, b int64
		if rows.Scan(&name, &n, &b) == nil {
			all++
			st.Bytes += b
			if sharded[name] {
				st.Rows += n
				tables = append(tables, name)
			}
		}
	}
	rows.Close()
	st.RowsKind, st.SizeKind = kindEstimate, kindEstimate
	if b, ok := tablespaceBytes(ctx, conn, l.Schema, all); ok {
		st.Bytes, st.SizeKind = b, kindTablespace
	}
	if exact {
		st.RowsKind = kindExact
		st.Rows = 0
		for _, t := range tables {
			var n int64
			if err := conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+dbutil.Table(l.Schema, t)).Scan(&n); err != nil {
				st.Error = err.Error()
				continue
			}
			st.Rows += n
		}
	}
	return st
}
