package cmd

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/sandbox"
)

func (a *app) sandboxCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "sandbox",
		Short: "Local MariaDB or MySQL servers for the demo and the tests (plain processes on loopback)",
	}
	pf := c.PersistentFlags()
	pf.String("sandbox-dir", filepath.Join(os.TempDir(), "shardctl-sandbox"), "directory of the sandbox servers [SHARDCTL_SANDBOX_DIR]")
	pf.Int("servers", 3, "number of servers")
	pf.Int("base-port", 13306, "port of server 1; server i listens on base-port+i-1")
	pf.Int("replicas", 0, "GTID replicas per server, numbered after the servers on the ports that follow (default: what 'sandbox up' started in this directory, else none)")
	pf.String("flavor", "", "server flavor: mariadb, or mysql (Oracle MySQL in a Debian root, built on first use); default: what 'sandbox up' started in this directory, else mariadb [SHARDCTL_FLAVOR]")
	pf.String("server-version", "", "server version: 11.8 (MariaDB 11.8 in a Debian root, built on first use; implies --flavor mariadb); default: what 'sandbox up' started in this directory, else the system's MariaDB (or MySQL's root) [SHARDCTL_SERVER_VERSION]")
	c.AddCommand(a.sbUp(), a.sbDown(), a.sbStatus(), a.sbSeed())
	return c
}

func (a *app) sandboxConfig() sandbox.Config {
	c := sandbox.Config{Dir: a.v.GetString("sandbox-dir"), Servers: a.v.GetInt("servers"), BasePort: a.v.GetInt("base-port"), Flavor: a.v.GetString("flavor"),
		BufferPoolMB: a.v.GetInt("buffer-pool-mb")}
	c.Version = a.v.GetString("server-version")
	switch {
	case c.Flavor == "" && c.Version != "":
		c.Flavor = sandbox.FlavorMariaDB // the only version a root gives besides MySQL's
	case c.Flavor == "":
		c.Flavor, c.Version = sandbox.SavedFlavor(c.Dir), sandbox.SavedVersion(c.Dir)
	case !a.v.IsSet("server-version") && c.Flavor == sandbox.SavedFlavor(c.Dir):
		c.Version = sandbox.SavedVersion(c.Dir)
	}
	if !a.v.IsSet("replicas") {
		c.Replicas = sandbox.SavedReplicas(c.Dir)
	} else {
		c.Replicas = a.v.GetInt("replicas")
	}
	return c
}

func printServers(w io.Writer, srv []sandbox.Server) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tADDRESS\tPID\tRUNNING\tANSWERS\tREPLICA OF")
	for _, s := range srv {
		of := "-"
		if s.ReplicaOf > 0 {
			of = strconv.Itoa(s.ReplicaOf)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%v\t%v\t%s\n", s.Index, s.Addr(), s.PID, s.Running, s.Answers, of)
	}
	tw.Flush()
}

func (a *app) sbUp() *cobra.Command {
	c := &cobra.Command{
		Use:   "up",
		Short: "Start the sandbox servers (idempotent) and write DIR/shardctl.yaml for them",
		Args:  argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := a.sandboxConfig()
			if err := cfg.Validate(); err != nil {
				return badInput("%v", err)
			}
			srv, err := sandbox.Up(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			conf := filepath.Join(cfg.Dir, "shardctl.yaml")
			// Sandbox credentials only; the file is private to its owner.
			body := fmt.Sprintf("shardmap: %s/shardmap\nuser: %s\npassword: %s\n", srv[0].Addr(), sandbox.ToolUser, sandbox.ToolPassword)
			if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
				return err
			}
			return a.emit(map[string]any{"servers": srv, "config": conf}, func(w io.Writer) {
				printServers(w, srv)
				fmt.Fprintf(w, "\nconfig for these servers: %s (use --config %s)\n", conf, conf)
			})
		},
	}
	c.Flags().Int("buffer-pool-mb", sandbox.DefaultBufferPoolMB, "InnoDB buffer pool of every server, in MiB, for servers this command starts (a benchmark of a large shard gives one that holds it)")
	return c
}

func (a *app) sbDown() *cobra.Command {
	var purge bool
	c := &cobra.Command{
		Use:   "down",
		Short: "Stop the sandbox servers (--purge also deletes their data)",
		Args:  argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := a.sandboxConfig()
			if err := sandbox.Down(cmd.Context(), cfg, purge); err != nil {
				return err
			}
			return a.emit(map[string]any{"stopped": cfg.Servers, "purged": purge}, func(w io.Writer) {
				fmt.Fprintf(w, "sandbox stopped (%d servers)\n", cfg.Servers)
			})
		},
	}
	c.Flags().BoolVar(&purge, "purge", false, "delete the data directories too (the servers are killed rather than shut down cleanly: their data goes next)")
	return c
}

func (a *app) sbStatus() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Say which sandbox servers run and answer",
		Args:  argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			srv, err := sandbox.Status(cmd.Context(), a.sandboxConfig())
			if err != nil {
				return badInput("%v", err)
			}
			return a.emit(srv, func(w io.Writer) { printServers(w, srv) })
		},
	}
}

func (a *app) sbSeed() *cobra.Command {
	var shards, employees int
	var width int64
	var hash, list bool
	var prefix string
	c := &cobra.Command{
		Use:   "seed",
		Short: "Create the book's employees data set over range shards and register them in the shard map",
		Long: `seed creates the employees, salaries, titles, dept_emp and dept_manager tables
(sharded on emp_no) and departments (global) in one schema per shard, spreads
the shards round-robin over the sandbox servers, and registers locations,
the "employees" RANGE function, sharded columns and ranges in the shard map
(--shardmap, or the sandbox's own on server 1). Deterministic and idempotent.`,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := a.sandboxConfig()
			srv, err := sandbox.Status(cmd.Context(), cfg)
			if err != nil {
				return badInput("%v", err)
			}
			var addrs []dbutil.Addr
			for _, s := range srv {
				if s.ReplicaOf > 0 {
					continue // replicas get the shards through replication
				}
				if !s.Answers {
					return badInput("sandbox server %d (%s) is not running: run 'shardctl sandbox up' first", s.Index, s.Addr())
				}
				addrs = append(addrs, s.Addr())
			}
			if a.v.GetString("shardmap") == "" {
				a.v.Set("shardmap", srv[0].Addr().String()+"/shardmap")
				a.v.Set("user", sandbox.ToolUser)
				a.v.Set("password", sandbox.ToolPassword)
			}
			s, closeFn, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			defer closeFn()
			p := a.newProgress("seed", int64(shards*employees*9))
			var last = map[int]int64{}
			out, err := sandbox.Seed(cmd.Context(), s, sandbox.SeedConfig{Servers: addrs, Creds: a.shardCreds(), Shards: shards, Employees: employees, RangeWidth: width, Hash: hash, List: list, SchemaPrefix: prefix,
				Progress: func(shard int, rows int64) { p.Add(rows - last[shard]); last[shard] = rows }})
			p.Finish()
			if err != nil {
				return err
			}
			return a.emit(out, func(w io.Writer) {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "SHARD\tSERVER\tSCHEMA\tLOWER BOUND\tROWS")
				for _, sh := range out {
					fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\n", sh.ShardID, sh.Server, sh.Schema, sh.Lower, sh.Rows)
				}
				tw.Flush()
			})
		},
	}
	c.Flags().IntVar(&shards, "shards", 6, "number of range shards")
	c.Flags().IntVar(&employees, "employees", 2000, "employees per shard (about 9 rows each)")
	c.Flags().Int64Var(&width, "range-width", 1_000_000, "keys per range shard")
	c.Flags().StringVar(&prefix, "schema-prefix", "shard_", "shard k's schema is PREFIXk (a second fleet on the same servers needs its own prefix and shard map)")
	c.Flags().BoolVar(&hash, "hash", false, "shard by consistent hash (MD5 ring) instead of ranges")
	c.Flags().BoolVar(&list, "list", false, "shard by LIST: each employee a tenant, one list point per emp_no (and as many tenants without rows yet)")
	return c
}
