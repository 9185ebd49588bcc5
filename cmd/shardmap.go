package cmd

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/binlog"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/pipeline"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
)

func (a *app) shardmapCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "shardmap",
		Short: "Create, inspect and edit the shard map (the sharding database)",
	}
	c.AddCommand(a.smInit(), a.smShow(), a.smAddShard(), a.smAddFunction(), a.smAddColumn(),
		a.smAddRange(), a.smAddHashPoint(), a.smAddPoint(), a.smImport(), a.smExport(), a.smSetStatus(), a.smSetPolicy(), a.smLookup(), a.smRemoveShard())
	return c
}

// withStore runs fn with the sharding database open.
func (a *app) withStore(cmd *cobra.Command, fn func(s *shardmap.Store) error) error {
	s, closeFn, err := a.store(cmd.Context())
	if err != nil {
		return err
	}
	defer closeFn()
	return fn(s)
}

func (a *app) smInit() *cobra.Command {
	return &cobra.Command{
		Use:   "init",
		Short: "Create the shard map's schema and tables (idempotent)",
		Args:  argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withStore(cmd, func(s *shardmap.Store) error {
				if err := s.Init(cmd.Context()); err != nil {
					return err
				}
				v, err := s.Version(cmd.Context())
				if err != nil {
					return err
				}
				return a.emit(map[string]any{"schema": s.Schema, "version": v}, func(w io.Writer) {
					fmt.Fprintf(w, "shard map ready in schema %s (version %d)\n", s.Schema, v)
				})
			})
		},
	}
}

func (a *app) smShow() *cobra.Command {
	var points bool
	c := &cobra.Command{
		Use:   "show [--points]",
		Short: "Print locations, partition functions, sharded columns and mappings (LIST points as runs per shard; --points or -o json for every key)",
		Args:  argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withStore(cmd, func(s *shardmap.Store) error {
				m, err := s.Load(cmd.Context())
				if err != nil {
					return err
				}
				return a.emit(m, func(w io.Writer) { printMap(w, m, points) })
			})
		},
	}
	c.Flags().BoolVar(&points, "points", false, "print every LIST point on a line of its own")
	return c
}

// printMap prints the map; a LIST function's points as one line per shard
// and status (runs of keys and a count, as status prints them) unless points.
func printMap(w io.Writer, m *shardmap.Map, points bool) {
	fmt.Fprintf(w, "shard map version %d\n\n", m.Version)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tSERVER\tSCHEMA\tPOLICY")
	for _, l := range m.Locations {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", l.ShardID, l.Addr(), l.Schema, policyName(m.Dedicated(l.ShardID)))
	}
	tw.Flush()
	for _, f := range m.Functions {
		var cols []string
		for _, c := range m.Columns {
			if c.FuncID == f.ID {
				cols = append(cols, c.Table+"."+c.Column)
			}
		}
		fmt.Fprintf(w, "\nfunction %d %q: %s, %s keys; sharded columns: %s\n", f.ID, f.Name, f.Type, f.KeyType, orNone(strings.Join(cols, ", ")))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  MAPPING\tSHARD\tSTATUS")
		ms := m.MappingsOf(f.ID)
		if f.Type == shardmap.List && !points {
			for _, g := range shardmap.GroupByShard(ms) {
				fmt.Fprintf(tw, "  %s\t%d\t%s\n", shardmap.Summary(g), g[0].ShardID, g[0].Status)
			}
			ms = nil
		}
		for _, mp := range ms {
			fmt.Fprintf(tw, "  %s\t%d\t%s\n", mp, mp.ShardID, mp.Status)
		}
		tw.Flush()
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func (a *app) smAddShard() *cobra.Command {
	var server, schema string
	c := &cobra.Command{
		Use:   "add-shard --server HOST:PORT --schema NAME",
		Short: "Register a shard location (idempotent)",
		Args:  argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			addr, err := dbutil.ParseAddr(server)
			if err != nil {
				return badInput("--server: %v", err)
			}
			if schema == "" {
				return badInput("add-shard needs --schema NAME (the schema that holds the shard)")
			}
			return a.withStore(cmd, func(s *shardmap.Store) error {
				ok, err := shardmap.SchemaExists(cmd.Context(), addr, a.shardCreds(), schema)
				if err != nil {
					return withCode(ExitBadInput, fmt.Errorf("add-shard: cannot read %s: %w", addr, err))
				}
				if !ok {
					return badInput("schema %s does not exist on %s: add-shard registers an existing shard; a split creates its new shard's schema and location itself", schema, addr)
				}
				if err := a.refuseAlias(cmd.Context(), s, addr, schema); err != nil {
					return err
				}
				var id int
				at := plans.Endpoint{Host: addr.Host, Port: addr.Port, Schema: schema}
				if err := a.editMap(cmd.Context(), s, pipeline.MapEdit{Command: "add-shard", At: &at}, func() (err error) {
					id, err = s.AddShard(cmd.Context(), addr.Host, addr.Port, schema)
					return err
				}); err != nil {
					return err
				}
				return a.emit(map[string]any{"shard_id": id}, func(w io.Writer) { fmt.Fprintf(w, "shard %d at %s/%s\n", id, addr, schema) })
			})
		},
	}
	c.Flags().StringVar(&server, "server", "", "server HOST:PORT")
	c.Flags().StringVar(&schema, "schema", "", "schema holding the shard")
	return c
}

// refuseAlias refuses to register addr/schema when a location of the map is
// that same schema on the same server under another address (localhost for
// 127.0.0.1, a second DNS name): two shard ids for one copy of the rows.
func (a *app) refuseAlias(ctx context.Context, s *shardmap.Store, addr dbutil.Addr, schema string) error {
	m, err := s.Load(ctx)
	if err != nil {
		return err
	}
	var id string
	for _, l := range m.Locations {
		if l.Schema != schema || l.Addr() == addr {
			continue
		}
		if id == "" {
			if id, err = serverIdentity(ctx, addr, a.shardCreds()); err != nil {
				return withCode(ExitBadInput, fmt.Errorf("add-shard: %s: %w", addr, err))
			}
		}
		other, err := serverIdentity(ctx, l.Addr(), a.shardCreds())
		if err != nil {
			continue // an unreachable server is not the one that answered as addr
		}
		if other == id {
			return badInput("%s/%s is shard %d (%s/%s) under another address: the same server and schema; use shard %d", addr, schema, l.ShardID, l.Addr(), l.Schema, l.ShardID)
		}
	}
	return nil
}

// serverIdentity names the server at addr (binlog.ServerIdentity).
func serverIdentity(ctx context.Context, addr dbutil.Addr, creds dbutil.Creds) (string, error) {
	db, err := dbutil.Open(ctx, addr, creds, "")
	if err != nil {
		return "", err
	}
	defer db.Close()
	return binlog.ServerIdentity(ctx, db)
}

func (a *app) smAddFunction() *cobra.Command {
	var typ, keyType string
	c := &cobra.Command{
		Use:   "add-function NAME --type RANGE|HASH|LIST [--key-type INT|STRING]",
		Short: "Register a partition function (idempotent)",
		Args:  argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			kt, err := keyspace.ParseKeyType(keyType)
			if err != nil {
				return badInput("--key-type: %v", err)
			}
			return a.withStore(cmd, func(s *shardmap.Store) error {
				id, err := s.AddFunction(cmd.Context(), args[0], shardmap.ShardingType(typ), kt)
				if err != nil {
					return err
				}
				return a.emit(map[string]any{"func_id": id}, func(w io.Writer) { fmt.Fprintf(w, "function %d %q\n", id, args[0]) })
			})
		},
	}
	c.Flags().StringVar(&typ, "type", "RANGE", "RANGE, HASH or LIST")
	c.Flags().StringVar(&keyType, "key-type", "INT", "INT (signed 64-bit) or STRING")
	return c
}

func (a *app) smAddColumn() *cobra.Command {
	var fn string
	c := &cobra.Command{
		Use:   "add-column TABLE COLUMN --function NAME",
		Short: "Record that TABLE is sharded on COLUMN (unlisted tables are global)",
		Args:  argsUsage(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withStore(cmd, func(s *shardmap.Store) error {
				e := pipeline.MapEdit{Command: "add-column", Function: fn, AllOfFunction: true}
				if err := a.editMap(cmd.Context(), s, e, func() error { return s.AddColumn(cmd.Context(), args[0], args[1], fn) }); err != nil {
					return err
				}
				return a.emit(map[string]any{"table": args[0], "column": args[1]}, func(w io.Writer) {
					fmt.Fprintf(w, "%s is sharded on %s by %s\n", args[0], args[1], fn)
				})
			})
		},
	}
	c.Flags().StringVar(&fn, "function", "", "partition function name")
	return c
}

func (a *app) smAddRange() *cobra.Command {
	var fn, lower string
	var shard int
	c := &cobra.Command{
		Use:   "add-range --function NAME --lower KEY --shard ID",
		Short: "Map keys from KEY up to the next range's lower bound to a shard",
		Args:  argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("lower") {
				return badInput("add-range needs --lower")
			}
			return a.withStore(cmd, func(s *shardmap.Store) error {
				e := pipeline.MapEdit{Command: "add-range", Shards: []int{shard}, Function: fn, Key: lower}
				if err := a.editMap(cmd.Context(), s, e, func() error { return s.AddRange(cmd.Context(), fn, lower, shard) }); err != nil {
					return err
				}
				return a.emit(map[string]any{"function": fn, "lower": lower, "shard_id": shard}, func(w io.Writer) {
					fmt.Fprintf(w, "range from %s of %s -> shard %d\n", lower, fn, shard)
				})
			})
		},
	}
	c.Flags().StringVar(&fn, "function", "", "partition function name")
	c.Flags().StringVar(&lower, "lower", "", "inclusive lower bound")
	c.Flags().IntVar(&shard, "shard", 0, "shard id")
	return c
}

func (a *app) smAddHashPoint() *cobra.Command {
	var fn, hash, name string
	var shard int
	c := &cobra.Command{
		Use:   "add-hash-point --function NAME (--hash MD5 | --name TEXT) --shard ID",
		Short: "Add a consistent-hash ring point for a shard (--name hashes TEXT with MD5, as the book does)",
		Args:  argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (hash == "") == (name == "") {
				return badInput("give exactly one of --hash and --name")
			}
			if name != "" {
				hash, _ = keyspace.HashOf(name)
			}
			return a.withStore(cmd, func(s *shardmap.Store) error {
				e := pipeline.MapEdit{Command: "add-hash-point", Shards: []int{shard}, Function: fn, Hash: hash}
				if err := a.editMap(cmd.Context(), s, e, func() error { return s.AddHashPoint(cmd.Context(), fn, hash, shard) }); err != nil {
					return err
				}
				return a.emit(map[string]any{"function": fn, "hash": hash, "shard_id": shard}, func(w io.Writer) {
					fmt.Fprintf(w, "ring point %s of %s -> shard %d\n", hash, fn, shard)
				})
			})
		},
	}
	c.Flags().StringVar(&fn, "function", "", "partition function name")
	c.Flags().StringVar(&hash, "hash", "", "32-digit hex MD5 ring position")
	c.Flags().StringVar(&name, "name", "", "text whose MD5 is the ring position")
	c.Flags().IntVar(&shard, "shard", 0, "shard id")
	return c
}

func (a *app) smAddPoint() *cobra.Command {
	var fn, key string
	var shard int
	c := &cobra.Command{
		Use:   "add-point --function NAME --key KEY --shard ID",
		Short: "Map one key of a LIST function to a shard",
		Args:  argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withStore(cmd, func(s *shardmap.Store) error {
				e := pipeline.MapEdit{Command: "add-point", Shards: []int{shard}, Function: fn, Key: key}
				if err := a.editMap(cmd.Context(), s, e, func() error { return s.AddPoint(cmd.Context(), fn, key, shard) }); err != nil {
					return err
				}
				return a.emit(map[string]any{"function": fn, "key": key, "shard_id": shard}, func(w io.Writer) {
					fmt.Fprintf(w, "key %s of %s -> shard %d\n", key, fn, shard)
				})
			})
		},
	}
	c.Flags().StringVar(&fn, "function", "", "partition function name")
	c.Flags().StringVar(&key, "key", "", "the key")
	c.Flags().IntVar(&shard, "shard", 0, "shard id")
	return c
}

func (a *app) smSetStatus() *cobra.Command {
	var shard int
	c := &cobra.Command{
		Use:   "set-status --shard ID online|offline",
		Short: "Mark every mapping of a shard online or offline (offline tells applications to retry)",
		Args:  argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			status := strings.ToLower(args[0])
			if status != shardmap.Online && status != shardmap.Offline {
				return badInput("status %q: use online or offline", args[0])
			}
			return a.withStore(cmd, func(s *shardmap.Store) error {
				m, err := loadWithShard(cmd.Context(), s, shard)
				if err != nil {
					return err
				}
				var changes []shardmap.Change
				for _, mp := range m.ShardMappings(shard) {
					changes = append(changes, shardmap.Change{Op: shardmap.OpSetStatus, Ref: mp.Ref(), Status: status})
				}
				e := pipeline.MapEdit{Command: "set-status", Shards: []int{shard}}
				if err := a.editMap(cmd.Context(), s, e, func() error { return s.Apply(cmd.Context(), "set status", changes) }); err != nil {
					return err
				}
				return a.emit(map[string]any{"shard_id": shard, "status": status, "mappings": len(changes)}, func(w io.Writer) {
					fmt.Fprintf(w, "shard %d: %d mappings %s\n", shard, len(changes), status)
				})
			})
		},
	}
	c.Flags().IntVar(&shard, "shard", 0, "shard id")
	return c
}

// policyName is a shard's policy as status and shardmap show print it.
func policyName(dedicated bool) string {
	if dedicated {
		return shardmap.PolicyDedicated
	}
	return shardmap.PolicyShared
}

func (a *app) smSetPolicy() *cobra.Command {
	var shard int
	var dedicated, shared bool
	c := &cobra.Command{
		Use:   "set-policy --shard ID --dedicated|--no-dedicated",
		Short: "Mark a shard dedicated (rebalance moves no key into or out of it), or shared again",
		Long: `set-policy marks a shard dedicated: rebalance never moves keys (tenants)
into or out of it, nor moves, splits or merges it; it is counted in its
server's rows. 'move --keys ... --to HOST:PORT' marks the shard it creates
dedicated itself. --no-dedicated makes the shard shared again. The change
bumps the map's version and is refused while an unfinished plan owns the
shard, as every shard-map edit is.`,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if shard <= 0 {
				return badInput("give --shard ID (see 'shardctl shardmap show')")
			}
			if dedicated == shared {
				return badInput("give --dedicated (rebalance leaves the shard alone) or --no-dedicated (shared again), one of them")
			}
			return a.withStore(cmd, func(s *shardmap.Store) error {
				if _, err := loadWithShard(cmd.Context(), s, shard); err != nil {
					return a.opError(err, nil)
				}
				var changed bool
				e := pipeline.MapEdit{Command: "set-policy", Shards: []int{shard}}
				if err := a.editMap(cmd.Context(), s, e, func() (err error) {
					changed, err = s.SetPolicy(cmd.Context(), shard, dedicated)
					return err
				}); err != nil {
					return err
				}
				policy := policyName(dedicated)
				return a.emit(map[string]any{"shard_id": shard, "policy": policy, "changed": changed}, func(w io.Writer) {
					if !changed {
						fmt.Fprintf(w, "shard %d is %s already (nothing changed)\n", shard, policy)
						return
					}
					fmt.Fprintf(w, "shard %d is now %s\n", shard, policy)
				})
			})
		},
	}
	c.Flags().IntVar(&shard, "shard", 0, "shard id")
	c.Flags().BoolVar(&dedicated, "dedicated", false, "rebalance moves no key into or out of the shard")
	c.Flags().BoolVar(&shared, "no-dedicated", false, "the shard is shared again: rebalance may move keys into and out of it")
	return c
}

func (a *app) smLookup() *cobra.Command {
	var table, fn string
	c := &cobra.Command{
		Use:   "lookup KEY (--table TABLE | --function NAME)",
		Short: "Say which shard holds KEY",
		Args:  argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (table == "") == (fn == "") {
				return badInput("give exactly one of --table and --function")
			}
			return a.withStore(cmd, func(s *shardmap.Store) error {
				m, err := s.Load(cmd.Context())
				if err != nil {
					return err
				}
				var f shardmap.Function
				if table != "" {
					var ok bool
					if f, _, ok = m.TableFunction(table); !ok {
						return badInput("table %q is not sharded (it is global: every shard has it)", table)
					}
				} else if f, err = m.Function(fn); err != nil {
					return err
				}
				res, err := m.Lookup(f, args[0])
				if err != nil {
					return err
				}
				return a.emit(res, func(w io.Writer) {
					fmt.Fprintf(w, "key %s -> shard %d at %s/%s (mapping %s, %s)\n", res.Key, res.Location.ShardID,
						res.Location.Addr(), res.Location.Schema, res.Mapping, res.Mapping.Status)
				})
			})
		},
	}
	c.Flags().StringVar(&table, "table", "", "a sharded table")
	c.Flags().StringVar(&fn, "function", "", "a partition function")
	return c
}

func (a *app) smRemoveShard() *cobra.Command {
	var shard int
	c := &cobra.Command{
		Use:   "remove-shard --shard ID",
		Short: "Remove an unused shard location (one no mapping points at); its schema is left as it is",
		Args:  argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if shard <= 0 {
				return badInput("give --shard ID (see 'shardctl shardmap show')")
			}
			return a.withStore(cmd, func(s *shardmap.Store) error {
				m, err := loadWithShard(cmd.Context(), s, shard)
				if err != nil {
					return err
				}
				if ms := m.ShardMappings(shard); len(ms) > 0 {
					return badInput("shard %d still has %d mappings (first: %s): move, merge or re-point them first", shard, len(ms), ms[0])
				}
				e := pipeline.MapEdit{Command: "remove-shard", Shards: []int{shard}, Removes: true}
				if err := a.editMap(cmd.Context(), s, e, func() error {
					return s.Apply(cmd.Context(), "remove shard", []shardmap.Change{{Op: shardmap.OpRemoveLocation, ShardID: shard}})
				}); err != nil {
					return err
				}
				return a.emit(map[string]any{"shard_id": shard, "removed": true}, func(w io.Writer) {
					fmt.Fprintf(w, "shard %d's location removed (its schema, if any, is left as it is)\n", shard)
				})
			})
		},
	}
	c.Flags().IntVar(&shard, "shard", 0, "shard id")
	return c
}

// editMap runs edit unless an unfinished plan owns what e touches
// (pipeline.EditMap): that refusal exits 2, a shard lock held by a run 4.
func (a *app) editMap(ctx context.Context, s *shardmap.Store, e pipeline.MapEdit, edit func() error) error {
	return a.opError(pipeline.EditMap(ctx, s, a.planDir(), e, edit), nil)
}

// loadWithShard reads the shard map and checks that shard is in it.
func loadWithShard(ctx context.Context, s *shardmap.Store, shard int) (*shardmap.Map, error) {
	m, err := s.Load(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := m.Location(shard); err != nil {
		return nil, err
	}
	return m, nil
}
