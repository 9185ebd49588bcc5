package doctor

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/lock"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/planstore"
	"github.com/shardctl/shardctl/shardmap"
)

// Env is what doctor reads and repairs.
type Env struct {
	Store   *shardmap.Store
	Plans   *planstore.Store
	PlanDir string
	Creds   dbutil.Creds
	// StaleLock is how long a lock's session may sit idle before its
	// process counts as gone: a live holder checks its locks every 2 s.
	StaleLock time.Duration
}

// DefaultStaleLock is Env.StaleLock's default.
const DefaultStaleLock = time.Minute

// Read gathers the facts: the shard map, this map's plans (files and rows),
// every server the map and the plans name, and the locks.
func Read(ctx context.Context, env Env) (*Facts, error) {
	m, err := env.Store.Load(ctx)
	if err != nil {
		return nil, err
	}
	f := &Facts{Now: time.Now().UTC(), Map: m}
	if f.Plans, f.StoreOK, err = readPlans(ctx, env); err != nil {
		return nil, err
	}
	f.Servers = readServers(ctx, env, m, f.Plans)
	if f.Locks, err = readLocks(ctx, env); err != nil {
		return nil, err
	}
	return f, nil
}

// readPlans pairs every plan file of this shard map with its row.
func readPlans(ctx context.Context, env Env) ([]PlanFacts, bool, error) {
	rows, err := env.Plans.All(ctx)
	storeOK := err == nil
	if err != nil {
		rows = map[string]*plans.Plan{}
	}
	byID := map[string]*PlanFacts{}
	names, _ := filepath.Glob(filepath.Join(env.PlanDir, "*.json"))
	for _, n := range names {
		p, err := plans.Load(n)
		if err != nil || (p.ShardMap.Schema != "" && p.ShardMap.Schema != env.Store.Schema) {
			continue // damaged files are 'plan list''s to show; other maps' plans are not this fleet's
		}
		byID[p.ID] = &PlanFacts{File: p, Path: n}
	}
	for id, p := range rows {
		if pf := byID[id]; pf != nil {
			pf.Row = p
		} else {
			byID[id] = &PlanFacts{Row: p}
		}
	}
	var out []PlanFacts
	for _, pf := range byID {
		pf.Plan = planstore.Later(pf.File, pf.Row)
		if unfinished(pf.Plan) {
			used, err := lock.InUse(ctx, env.Store.DB, pf.Plan.Locks)
			if err != nil {
				return nil, false, fmt.Errorf("plan %s: %w", pf.Plan.ID, err)
			}
			pf.Running = used
		}
		out = append(out, *pf)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Plan.CreatedAt.Before(out[j].Plan.CreatedAt) })
	return out, storeOK, nil
}

// readServers reads every server the map's locations and the plans'
// endpoints name: which of the schema names they use exist there, and the
// fence triggers in those schemas. Schemas with other names are never
// looked at: they are not shardctl's work.
func readServers(ctx context.Context, env Env, m *shardmap.Map, ps []PlanFacts) []ServerFacts {
	names := map[string]bool{}
	addrs := map[string]dbutil.Addr{}
	for _, l := range m.Locations {
		names[l.Schema] = true
		addrs[l.Addr().String()] = l.Addr()
	}
	for _, pf := range ps {
		for _, e := range []plans.Endpoint{pf.Plan.Source, pf.Plan.Target} {
			if e.Host == "" || e.Schema == "" {
				continue
			}
			names[e.Schema] = true
			addrs[e.Addr()] = dbutil.Addr{Host: e.Host, Port: e.Port}
		}
	}
	var list []string
	for n := range names {
		list = append(list, n)
	}
	sort.Strings(list)
	var out []ServerFacts
	for s, a := range addrs {
		sf := ServerFacts{Addr: s}
		if err := readServer(ctx, a, env.Creds, list, &sf); err != nil {
			sf.Error = err.Error()
		}
		out = append(out, sf)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out
}

func readServer(ctx context.Context, a dbutil.Addr, creds dbutil.Creds, names []string, sf *ServerFacts) error {
	db, err := dbutil.Open(ctx, a, creds, "")
	if err != nil {
		return err
	}
	defer db.Close()
	args := make([]any, len(names))
	for i, n := range names {
		args[i] = n
	}
	in := dbutil.Placeholders(len(names))
	var schema, table string
	if err := dbutil.ScanEach(ctx, db, "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME IN ("+in+") ORDER BY SCHEMA_NAME",
		args, []any{&schema}, func() error { sf.Schemas = append(sf.Schemas, schema); return nil }); err != nil {
		return fmt.Errorf("list schemas: %w", err)
	}
	byschema := map[string][]string{}
	var order []string
	if err := dbutil.ScanEach(ctx, db, "SELECT DISTINCT TRIGGER_SCHEMA, EVENT_OBJECT_TABLE FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA IN ("+in+") AND TRIGGER_NAME LIKE 'shardctl\\_fence\\_%' ORDER BY TRIGGER_SCHEMA, EVENT_OBJECT_TABLE",
		args, []any{&schema, &table}, func() error {
			if byschema[schema] == nil {
				order = append(order, schema)
			}
			byschema[schema] = append(byschema[schema], table)
			return nil
		}); err != nil {
		return fmt.Errorf("list fence triggers: %w", err)
	}
	// A fence table whose triggers are gone (a lift stopped between the two)
	// is a fence left too.
	if err := dbutil.ScanEach(ctx, db, "SELECT TABLE_SCHEMA FROM information_schema.TABLES WHERE TABLE_SCHEMA IN ("+in+") AND TABLE_NAME = ? ORDER BY TABLE_SCHEMA",
		append(args, fence.FenceTable), []any{&schema}, func() error {
			if byschema[schema] == nil {
				order = append(order, schema)
				byschema[schema] = []string{}
			}
			return nil
		}); err != nil {
		return fmt.Errorf("list fence tables: %w", err)
	}
	for _, sc := range order {
		fc := FenceFacts{Schema: sc, Tables: byschema[sc]}
		for _, t := range fc.Tables {
			on, err := fence.Fences(ctx, db, sc, t)
			if err != nil {
				return fmt.Errorf("the fence of %s: %w", dbutil.Table(sc, t), err)
			}
			fc.Fenced = fc.Fenced || on
		}
		sf.Fences = append(sf.Fences, fc)
	}
	return nil
}

// holderPID reads the pid and host lock.Holder wrote.
var holderPID = regexp.MustCompile(`\(pid (\d+) on ([^)]*)\)$`)

// readLocks reads the locks table, and for each lock held by its recorded
// session whether that session's process is gone: on this host, its pid is
// not running; anywhere, the session has sat idle past StaleLock (a live
// holder checks its locks every 2 s).
func readLocks(ctx context.Context, env Env) ([]LockFacts, error) {
	var out []LockFacts
	var l LockFacts
	var used sql.NullInt64
	err := dbutil.ScanEach(ctx, env.Store.DB, "SELECT name, holder, connection_id, IS_USED_LOCK(name) FROM "+dbutil.Table(env.Store.Schema, "locks")+" ORDER BY name",
		nil, []any{&l.Name, &l.Holder, &l.ConnID, &used}, func() error {
			l.Held, l.Dead = used.Valid && used.Int64 == l.ConnID, ""
			out = append(out, l)
			return nil
		})
	if dbutil.ErrNumber(err) == 1146 {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s.locks: %w", env.Store.Schema, err)
	}
	host, _ := os.Hostname()
	stale := env.StaleLock
	if stale <= 0 {
		stale = DefaultStaleLock
	}
	for i := range out {
		if !out[i].Held {
			continue
		}
		if m := holderPID.FindStringSubmatch(out[i].Holder); m != nil && m[2] == host {
			if pid, _ := strconv.Atoi(m[1]); pid > 0 && errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
				out[i].Dead = fmt.Sprintf("pid %d is not running on %s", pid, host)
				continue
			}
		}
		var cmd string
		var idle int64
		err := env.Store.DB.QueryRowContext(ctx, "SELECT COMMAND, TIME FROM information_schema.PROCESSLIST WHERE ID = ?", out[i].ConnID).Scan(&cmd, &idle)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("lock %s: read its session: %w", out[i].Name, err)
		}
		if err == nil && cmd == "Sleep" && time.Duration(idle)*time.Second >= stale {
			out[i].Dead = fmt.Sprintf("its session has been idle %d s; a live holder checks its lock every 2 s", idle)
		}
	}
	return out, nil
}
