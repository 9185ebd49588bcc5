package cmd

// One validation path for every flag: the allowed values of each flag name,
// the same for every command that has it (move, split, merge, rebalance,
// plan apply/resume, verify, prune, load, …), checked in PersistentPreRunE
// after the config file and SHARDCTL_* variables are folded into the flags,
// so a value refused on the command line is refused from the config too.

import (
	"fmt"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/sandbox"
)

// limit is the allowed range of a number or duration flag: lo..hi, and 0 too
// when off names what 0 means. Durations are in nanoseconds.
type limit struct {
	lo, hi float64
	off    string
}

const unbounded = math.MaxFloat64

var (
	// The operation settings' rules are in plans.Settings (withSettings).
	durationFlags = withSettings(map[string]limit{
		"hook-timeout": {lo: float64(10 * time.Millisecond), hi: float64(24 * time.Hour)},
		"every":        {lo: float64(100 * time.Millisecond), hi: float64(time.Hour)},
		"wait":         {lo: float64(time.Millisecond), hi: float64(24 * time.Hour)},
		"duration":     {lo: float64(time.Millisecond), hi: unbounded, off: "until interrupted"},
		"map-ttl":      {lo: float64(time.Millisecond), hi: float64(time.Hour)},
		"min-key-age":  {lo: float64(time.Second), hi: float64(365 * 24 * time.Hour), off: "no cool-down"},
		// A live lock holder checks its lock every 2 s: shorter would call it dead.
		"stale-lock": {lo: float64(5 * time.Second), hi: float64(24 * time.Hour)},
		// The connection watchdog (dbutil/watchdog.go).
		"watchdog-after": {lo: float64(100 * time.Millisecond), hi: float64(24 * time.Hour), off: "never probe"},
		"watchdog-probe": {lo: float64(100 * time.Millisecond), hi: float64(10 * time.Minute)},
	}, plans.KindMillis, plans.KindSeconds)
	numberFlags = withSettings(map[string]limit{
		"sleep-ms":         {lo: 0, hi: 60_000},
		"rate":             {lo: 1, hi: unbounded, off: "as fast as possible"},
		"concurrency":      {lo: 1, hi: 1024},
		"rounds":           {lo: 1, hi: 100},
		"max-shard-rows":   {lo: 1, hi: unbounded, off: "off"},
		"max-shard-bytes":  {lo: 1, hi: unbounded, off: "off"},
		"min-shard-rows":   {lo: 1, hi: unbounded, off: "off"},
		"min-shard-bytes":  {lo: 1, hi: unbounded, off: "off"},
		"max-server-share": {lo: 0.01, hi: 1, off: "off"},
		"shard":            {lo: 1, hi: math.MaxInt32, off: "not given"},
		"into":             {lo: 1, hi: math.MaxInt32, off: "not given"},
		"shards":           {lo: 1, hi: 1000},
		"servers":          {lo: 1, hi: 16},
		"base-port":        {lo: 1024, hi: 65535},
		"replicas":         {lo: 1, hi: sandbox.MaxReplicas, off: "none"},
		"buffer-pool-mb":   {lo: 64, hi: sandbox.MaxBufferPoolMB},
		"employees":        {lo: 1, hi: 10_000_000},
		"range-width":      {lo: 1, hi: unbounded},
		"seed":             {lo: -unbounded, hi: unbounded},
		"max-rows":         {lo: 1, hi: 1_000_000, off: "chunks only"},
		"threads":          {lo: 1, hi: 64},
		"top":              {lo: 1, hi: 1_000_000, off: "not given"},
	}, plans.KindInt, plans.KindInt64, plans.KindMillisN)
	// choiceFlags take one of a few words.
	choiceFlags = settingChoices(map[string][]string{})
	// addrFlags hold HOST:PORT (lists: each element); schemaFlags a schema name.
	addrFlags   = settingAddrs(map[string]bool{"to": true, "server": true, "against": true, "drain": true, "source": true})
	addrWords   = settingAddrWords()
	schemaFlags = map[string]bool{"schema": true}
	// replacedFiles name a file shardctl replaces whole (a temporary file
	// renamed over it): only a regular file, or none yet, may be there.
	replacedFiles = map[string]bool{"metrics-file": true}
	// listenFlags hold an address to listen on, [HOST]:PORT: checked with the
	// other flags, so a dry run refuses what a run would (issue 53).
	listenFlags = map[string]bool{"metrics-addr": true}
)

// checkFlag checks one flag's current value against its rule.
func checkFlag(fl *pflag.Flag) error {
	name, val := fl.Name, fl.Value.String()
	if l, ok := durationFlags[name]; ok {
		d, err := time.ParseDuration(val)
		if err != nil {
			return badInput("--%s %q: give a duration such as 500ms, 30s or 5m", name, val)
		}
		if !l.allows(float64(d)) {
			return badInput("--%s %s: allowed %s", name, d, l.describe(func(v float64) string { return time.Duration(v).String() }))
		}
		return nil
	}
	if l, ok := numberFlags[name]; ok {
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return badInput("--%s %q: give a number", name, val)
		}
		if !l.allows(v) {
			return badInput("--%s %s: allowed %s", name, val, l.describe(func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }))
		}
		return nil
	}
	if choices, ok := choiceFlags[name]; ok {
		if !slices.Contains(choices, val) {
			return badInput("--%s %q: give %s or %s", name, val, strings.Join(choices[:len(choices)-1], ", "), choices[len(choices)-1])
		}
		return nil
	}
	if replacedFiles[name] && val != "" {
		return checkReplacedFile(name, val)
	}
	if listenFlags[name] && val != "" {
		return checkListenAddr(name, val)
	}
	var values []string
	if sv, ok := fl.Value.(pflag.SliceValue); ok {
		values = sv.GetSlice()
	} else if val != "" {
		values = []string{val}
	}
	for _, v := range values {
		if addrFlags[name] && (addrWords[name] == "" || v != addrWords[name]) {
			if _, err := dbutil.ParseAddr(v); err != nil {
				if w := addrWords[name]; w != "" {
					return badInput("--%s %q: %v (give HOST:PORT or %s)", name, v, err, w)
				}
				return badInput("--%s %q: %v (give HOST:PORT)", name, v, err)
			}
		}
		if schemaFlags[name] {
			if err := dbutil.CheckSchemaName(v); err != nil {
				return badInput("--%s: %v", name, err)
			}
		}
	}
	return nil
}

// checkListenAddr refuses an address net.Listen cannot take by its form
// alone; a busy port is found when the run opens it (still before the plan
// is saved), and a dry run, which serves nothing, never opens it.
func checkListenAddr(name, val string) error {
	_, port, err := net.SplitHostPort(val)
	if err == nil {
		if n, perr := strconv.Atoi(port); perr != nil || n < 0 || n > 65535 {
			err = fmt.Errorf("port %q is not a number from 0 to 65535", port)
		}
	}
	if err != nil {
		return badInput("--%s %q: %v (give HOST:PORT or :PORT, e.g. 127.0.0.1:9100)", name, val, err)
	}
	return nil
}

// checkReplacedFile refuses a path where something other than a regular
// file is: the rename would put a regular file in place of a device, a
// directory's entry, a FIFO or a symbolic link.
func checkReplacedFile(name, path string) error {
	st, err := os.Lstat(path)
	if err != nil || st.Mode().IsRegular() {
		return nil // a missing file is created; a missing directory is refused when the file is first written
	}
	what := "not a regular file"
	switch {
	case st.IsDir():
		what = "a directory"
	case st.Mode()&os.ModeSymlink != 0:
		what = "a symbolic link"
	case st.Mode()&os.ModeDevice != 0:
		what = "a device"
	}
	return badInput("--%s %s is %s: shardctl replaces the file whole (a temporary file renamed over it), so give the path of a regular file, or of none yet (e.g. in node_exporter's textfile directory)", name, path, what)
}

func (l limit) allows(v float64) bool {
	return v >= l.lo && v <= l.hi || v == 0 && l.off != ""
}

func (l limit) describe(format func(float64) string) string {
	s := format(l.lo) + " to " + format(l.hi)
	if l.hi == unbounded {
		s = format(l.lo) + " or more"
	}
	if l.off != "" {
		s = fmt.Sprintf("0 (%s) or %s", l.off, s)
	}
	return s
}

// checkFlags checks every flag of the command (defaults included, which are
// inside their rules), the first refusal wins.
func checkFlags(c *cobra.Command) error {
	var first error
	c.Flags().VisitAll(func(fl *pflag.Flag) {
		if first == nil {
			first = checkFlag(fl)
		}
	})
	return first
}

// configIntoFlags gives each flag not on the command line its value from
// SHARDCTL_* or the config file, so the commands, which read their flag
// variables, see it, and checkFlags checks it.
func (a *app) configIntoFlags(c *cobra.Command) error {
	var first error
	c.Flags().VisitAll(func(fl *pflag.Flag) {
		if first != nil || fl.Changed || !a.v.IsSet(fl.Name) || fl.Name == "config" {
			return
		}
		values := []string{a.v.GetString(fl.Name)}
		if _, ok := fl.Value.(pflag.SliceValue); ok {
			values = a.v.GetStringSlice(fl.Name)
		}
		for _, v := range values {
			if err := c.Flags().Set(fl.Name, v); err != nil {
				first = badInput("%s (config or SHARDCTL_%s): %v", fl.Name, envName(fl.Name), err)
				return
			}
		}
	})
	return first
}

func envName(flag string) string { return strings.ToUpper(strings.ReplaceAll(flag, "-", "_")) }
