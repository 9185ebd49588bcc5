// Package cmd is shardctl's command line: cobra commands, viper
// configuration, terminal progress. It is the only package that knows about
// them, and the only one that exits the process.
package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/go-sql-driver/mysql"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/shardmap"
)

// Exit codes, documented in docs/exit-codes.md.
const (
	ExitOK        = 0 // done
	ExitFailed    = 1 // the operation failed; see the message
	ExitBadInput  = 2 // usage, configuration or input refused; nothing was changed
	ExitResumable = 3 // stopped part-way; the plan file is saved and 'shardctl plan resume' continues it
	ExitBusy      = 4 // another operation holds the lock on the shard; try again later
	ExitMismatch  = 5 // verify found differences
)

// Version is set at build time with -ldflags "-X github.com/shardctl/shardctl/cmd.Version=…".
var Version = "dev"

// exitError carries an exit code with an error.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

func badInput(format string, a ...any) error {
	return withCode(ExitBadInput, fmt.Errorf(format, a...))
}

// app is the state shared by the commands of one run.
type app struct {
	v       *viper.Viper
	json    bool // -o json seen on the command line before parsing (flag errors print JSON too)
	emitted bool // a JSON document went to stdout already
	out     io.Writer
	errOut  io.Writer
	log     *slog.Logger
	view    atomic.Pointer[liveView] // the step view while it is on screen (log lines print above it)
	fleet   *fleet                   // hooks, metrics (cmd/fleet.go)
	tls     *dbutil.TLSOptions       // --tls and its files, carried by every set of credentials
}

func (a *app) jsonOut() bool { return a.json || a.v.GetString("output") == "json" }

// emit prints v as JSON with --output json, else runs text.
func (a *app) emit(v any, text func(w io.Writer)) error {
	if a.jsonOut() {
		a.emitted = true
		enc := json.NewEncoder(a.out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	text(a.out)
	return nil
}

// Main runs the command line and exits with its code.
func Main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	tuneGC()
	stopProfile := cpuProfile()
	code := Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stopProfile()
	stop()
	os.Exit(code)
}

// tuneGC trades memory for CPU where the operator did not choose: the binlog
// tail allocates for every row event, and with Go's default GOGC=100 the
// collector took about a third of the tail's CPU in the catch-up benchmark.
// GOGC=400 with a 128 MiB soft limit collects a fifth as often while the
// heap is small, and as often as needed near the limit (docs/BENCHMARKS.md).
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(128 << 20)
	}
}

// cpuProfile writes a CPU profile of the process to
// $SHARDCTL_CPUPROFILE.<pid> when that is set: how the benchmarks find where
// shardctl spends its time (go tool pprof bin/shardctl FILE).
func cpuProfile() (stop func()) {
	dir := os.Getenv("SHARDCTL_CPUPROFILE")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(fmt.Sprintf("%s.%d", dir, os.Getpid()))
	if err != nil {
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return func() {}
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}

// Run executes one command line and returns its exit code (tests call it directly).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := &app{v: viper.New(), out: stdout, errOut: stderr, json: outputJSON(args)}
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	a.closeFleet()
	if err == nil {
		return ExitOK
	}
	code := exitCode(err)
	msg := err.Error()
	if strings.HasPrefix(msg, "unknown command") {
		msg += " (see 'shardctl --help')"
	}
	if pw := a.v.GetString("password"); pw != "" {
		msg = strings.ReplaceAll(msg, pw, "*****")
	}
	if pw := a.v.GetString("shard-password"); pw != "" {
		msg = strings.ReplaceAll(msg, pw, "*****")
	}
	fmt.Fprintln(stderr, "shardctl: "+msg)
	if a.jsonOut() && !a.emitted {
		// stdout carries exactly one JSON document: the result, or this error.
		doc := map[string]any{"error": msg, "exit_code": code}
		var of *opFailure
		if errors.As(err, &of) && of.plan != nil {
			doc["plan_id"], doc["state"] = of.plan.ID, of.plan.State // a script resumes or aborts it by id
		}
		_ = json.NewEncoder(stdout).Encode(doc)
	}
	return code
}

var errUsage = errors.New("usage")

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "shardctl",
		Short: "Rebalance a sharded MySQL/MariaDB fleet online: move, split and merge shards",
		Long: `shardctl moves a shard to another server, splits a hot range shard in two and
merges cold neighbours, online, with a write blackout measured in milliseconds.
The shard map lives in a MySQL/MariaDB "sharding database". Every operation is a
plan file: reviewable with --dry-run, saved after every step, resumable.

Configuration comes from flags, SHARDCTL_* environment variables and an optional
shardctl.yaml (./shardctl.yaml, ~/.config/shardctl/shardctl.yaml or --config).
Passwords come from the config file or SHARDCTL_PASSWORD / SHARDCTL_SHARD_PASSWORD,
never from the command line.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return a.loadConfig(cmd)
		},
	}
	pf := root.PersistentFlags()
	pf.String("config", "", "config file (default ./shardctl.yaml or ~/.config/shardctl/shardctl.yaml)")
	pf.String("shardmap", "", "the sharding database: HOST:PORT/SCHEMA or a DSN USER@tcp(HOST:PORT)/SCHEMA [SHARDCTL_SHARDMAP]")
	pf.String("user", "shardctl", "user for the sharding database [SHARDCTL_USER]")
	pf.String("shard-user", "", "user for the shard servers (default: --user) [SHARDCTL_SHARD_USER]")
	pf.StringP("output", "o", "text", "output format: text or json")
	pf.String("log-level", "info", "log level: debug, info, warn, error")
	pf.String("log-file", "", "also write log lines to FILE (on a terminal they stay off the step view)")
	pf.String("plan-dir", "", "directory of plan files (default ~/.local/state/shardctl/plans) [SHARDCTL_PLAN_DIR]")
	fleetFlags(pf)
	pf.String("tls", dbutil.TLSPreferred, "TLS to every server, the binlog reader and the sharding database: off, preferred, required, verify-ca, verify-identity [SHARDCTL_TLS]")
	pf.String("tls-ca", "", "PEM file of the CA that signs the servers' certificates (verify-ca, verify-identity) [SHARDCTL_TLS_CA]")
	pf.String("tls-cert", "", "PEM client certificate, with --tls-key [SHARDCTL_TLS_CERT]")
	pf.String("tls-key", "", "PEM client key, with --tls-cert [SHARDCTL_TLS_KEY]")
	// The connection watchdog's thresholds (dbutil/watchdog.go, docs/faults.md):
	// hidden, as only a test or a very unusual network wants them changed.
	pf.Duration("watchdog-after", dbutil.DefaultWatchdogAfter, "probe the server of a read or write waiting this long; 0: never [SHARDCTL_WATCHDOG_AFTER]")
	pf.Duration("watchdog-probe", dbutil.DefaultWatchdogProbe, "close the connection if the probe hears nothing within this [SHARDCTL_WATCHDOG_PROBE]")
	_ = pf.MarkHidden("watchdog-after")
	_ = pf.MarkHidden("watchdog-probe")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return withCode(ExitBadInput, fmt.Errorf("%w (see --help)", err))
	})
	root.AddCommand(a.versionCmd(), refuseUnknownSub(a.shardmapCmd()), refuseUnknownSub(a.sandboxCmd()), a.statusCmd(), a.moveCmd(), a.splitCmd(), a.mergeCmd(), refuseUnknownSub(a.planCmd()), a.loadCmd(), a.verifyCmd(), a.pruneCmd(), a.rebalanceCmd(), a.doctorCmd())
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			refuseUnknownSub(c)
		}
	}
	return root
}

func (a *app) loadConfig(cmd *cobra.Command) error {
	v := a.v
	v.SetEnvPrefix("SHARDCTL")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	if err := v.BindPFlags(cmd.Flags()); err != nil {
		return err
	}
	if f := v.GetString("config"); f != "" {
		v.SetConfigFile(f)
		if err := v.ReadInConfig(); err != nil {
			return badInput("read config file %s: %v", f, err)
		}
	} else if f := findConfig(); f != "" {
		v.SetConfigFile(f)
		if err := v.ReadInConfig(); err != nil {
			return badInput("read config file %s: %v", f, err)
		}
	}
	if err := a.configIntoFlags(cmd); err != nil {
		return err
	}
	if err := checkFlags(cmd); err != nil {
		return err
	}
	switch v.GetString("output") {
	case "text", "json":
	default:
		return badInput("--output %q: use text or json", v.GetString("output"))
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(v.GetString("log-level"))); err != nil {
		return badInput("--log-level %q: use debug, info, warn or error", v.GetString("log-level"))
	}
	log, err := a.newLogger(level)
	if err != nil {
		return err
	}
	a.log = log
	dbutil.SetWatchdog(v.GetDuration("watchdog-after"), v.GetDuration("watchdog-probe"), func(u *dbutil.Unanswered) {
		log.Warn(u.Error(), "server", u.Addr)
	})
	if a.tls, err = dbutil.NewTLS(dbutil.TLSOptions{Mode: v.GetString("tls"), CA: v.GetString("tls-ca"), Cert: v.GetString("tls-cert"), Key: v.GetString("tls-key")}); err != nil {
		return badInput("%v", err)
	}
	return a.loadFleet()
}

// shardMapConfig parses --shardmap into a driver config with credentials filled in.
func (a *app) shardMapConfig() (*mysql.Config, error) {
	raw := strings.TrimSpace(a.v.GetString("shardmap"))
	if raw == "" {
		return nil, badInput("no sharding database given: set --shardmap HOST:PORT/SCHEMA (or SHARDCTL_SHARDMAP, or shardmap: in shardctl.yaml)")
	}
	if err := noPasswordInDSN(raw); err != nil {
		return nil, err
	}
	dsn := raw
	if !strings.Contains(raw, "@") && !strings.Contains(raw, "(") {
		hostport, schema, ok := strings.Cut(raw, "/")
		if !ok || schema == "" {
			return nil, badInput("--shardmap %q: give HOST:PORT/SCHEMA, for example 127.0.0.1:3306/shardmap", raw)
		}
		addr, err := dbutil.ParseAddr(hostport)
		if err != nil {
			return nil, badInput("--shardmap %q: %v", raw, err)
		}
		dsn = fmt.Sprintf("%s@tcp(%s)/%s", a.v.GetString("user"), addr, schema)
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, badInput("--shardmap: malformed DSN (%v); give HOST:PORT/SCHEMA or USER@tcp(HOST:PORT)/SCHEMA", dbutil.Redact(err, a.v.GetString("password")))
	}
	if cfg.DBName == "" {
		return nil, badInput("--shardmap: the DSN names no schema; add /SCHEMA")
	}
	if cfg.Passwd == "" {
		cfg.Passwd = a.v.GetString("password")
	}
	base := dbutil.Config(dbutil.Addr{}, dbutil.Creds{User: cfg.User, Password: cfg.Passwd, TLS: a.tls}, "")
	base.Net, base.Addr = cfg.Net, cfg.Addr
	return base, nil
}

// store opens the sharding database. Connection failures are bad input: the
// configuration is wrong or the server is not there, and nothing was changed.
func (a *app) store(ctx context.Context) (*shardmap.Store, func(), error) {
	cfg, err := a.shardMapConfig()
	if err != nil {
		return nil, nil, err
	}
	raw := a.v.GetString("shardmap")
	schema := raw[strings.LastIndex(raw, "/")+1:]
	if i := strings.IndexByte(schema, '?'); i >= 0 {
		schema = schema[:i]
	}
	db, err := dbutil.OpenConfig(ctx, cfg)
	if err != nil {
		return nil, nil, withCode(ExitBadInput, fmt.Errorf("sharding database: %w", err))
	}
	s := shardmap.New(db, schema)
	s.Rows = shardmap.ShardRows(a.shardCreds())
	// A map an older shardctl created is upgraded on first use (one read of
	// its format when it is current). One that cannot be (no privilege) is
	// still served, without shard policies and key cool-downs.
	if err := s.Upgrade(ctx); err != nil && !errors.Is(err, shardmap.ErrBadInput) {
		a.log.Warn("the shard map could not be upgraded; shard policies and rebalance's cool-down are off until it is ('shardctl shardmap init' upgrades it)", "err", dbutil.Redact(err, a.v.GetString("password")))
	}
	return s, func() { db.Close() }, nil
}

// shardCreds are the credentials for the shard servers.
func (a *app) shardCreds() dbutil.Creds {
	c := dbutil.Creds{User: a.v.GetString("shard-user"), Password: a.v.GetString("shard-password"), TLS: a.tls}
	if c.User == "" {
		c.User = a.v.GetString("user")
		if cfg, err := a.shardMapConfig(); err == nil {
			c.User = cfg.User
		}
	}
	if c.Password == "" {
		c.Password = a.v.GetString("password")
	}
	return c
}

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print shardctl's version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return a.emit(map[string]string{"version": Version}, func(w io.Writer) { fmt.Fprintln(w, "shardctl", Version) })
		},
	}
}

// argsUsage wraps cobra's positional-argument checks so they exit with code 2.
func argsUsage(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return withCode(ExitBadInput, fmt.Errorf("%s: %w (usage: %s)", cmd.CommandPath(), err, cmd.UseLine()))
		}
		return nil
	}
}
