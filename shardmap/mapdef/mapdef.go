// Package mapdef holds the shard map's value types that plans carry: the
// identity of a mapping (Ref), one idempotent edit (Change) with the SQL it
// runs and its one-line description. It needs no database, so a plan can be
// read and printed by a program that links no SQL driver; package shardmap
// re-exports every name here and applies the changes.
package mapdef

import (
	"fmt"
	"strings"

	"github.com/shardctl/shardctl/dbutil/ident"
	"github.com/shardctl/shardctl/keyspace"
)

// ShardingType is a partition function's mapping kind.
type ShardingType string

const (
	Range ShardingType = "RANGE"
	Hash  ShardingType = "HASH"
	List  ShardingType = "LIST"
)

// Status of a mapping: an offline mapping tells clients to retry later.
const (
	Online  = "online"
	Offline = "offline"
)

// Ref identifies a mapping without its shard or status.
type Ref struct {
	FuncID int           `json:"func_id"`
	Kind   ShardingType  `json:"kind"`
	Lower  *keyspace.Key `json:"lower,omitempty"`
	Hash   string        `json:"hash,omitempty"`
	Point  *keyspace.Key `json:"point,omitempty"`
	// Points name a set of LIST points changed together by one statement
	// (a key move's tenants, a LIST merge's every key): a shard of
	// thousands of tenants is switched in one UPDATE, not thousands.
	Points keyspace.KeyList `json:"points,omitempty"`
}

// Keys are the LIST points ref names: its Points, or its one Point.
func (r Ref) Keys() []keyspace.Key {
	if len(r.Points) > 0 {
		return r.Points
	}
	if r.Point != nil {
		return []keyspace.Key{*r.Point}
	}
	return nil
}

// Change is one idempotent edit of the shard map. Operations are lists of
// changes applied in one transaction; plans store them and dry runs print their SQL.
type Change struct {
	Op      string        `json:"op"` // set_status, repoint, split_range, merge_range, add_hash_point, remove_mapping, move_location, remove_location
	Ref     Ref           `json:"ref,omitempty"`
	At      *keyspace.Key `json:"at,omitempty"` // split_range
	ShardID int           `json:"shard_id,omitempty"`
	Status  string        `json:"status,omitempty"`
	Host    string        `json:"host,omitempty"`
	Port    int           `json:"port,omitempty"`
	Schema  string        `json:"schema,omitempty"` // add_location
	// Policy is what set_policy makes of shard ShardID: PolicyDedicated or
	// PolicyShared.
	Policy string `json:"policy,omitempty"`
}

// Shard policies (set_policy): a dedicated shard is left alone by
// rebalance (no key moves into or out of it); shared is the default.
const (
	PolicyDedicated = "dedicated"
	PolicyShared    = "shared"
)

// Format is the shard map's table layout this shardctl writes (the version
// row's format column): 2 added shard_policies and list_points.moved_at. A
// map of an older format is read without them and upgraded in place
// (shardmap.Store.Upgrade).
const Format = 2

// NewShard stands for the shard id an add_location change registers (a
// split's new shard): a plan's changes use it until its create step knows the id.
const NewShard = -1

// Change ops.
const (
	OpSetStatus      = "set_status"
	OpRepoint        = "repoint"
	OpSplitRange     = "split_range"
	OpMergeRange     = "merge_range"
	OpAddHashPoint   = "add_hash_point"
	OpRemoveMapping  = "remove_mapping"
	OpMoveLocation   = "move_location"
	OpRemoveLocation = "remove_location"
	OpAddLocation    = "add_location" // registers Host:Port Schema as a new shard (a split's target)
	OpSetPolicy      = "set_policy"   // marks shard ShardID dedicated or shared (Policy)
)

// SQL is the statement a change runs against the shard map.
func (c Change) SQL(schema string) (string, []any) { return c.SQLFormat(schema, Format) }

// SQLFormat is SQL for a map of the given format: from format 2 a LIST
// point re-pointed is stamped with the time it moved (in the same
// statement: rebalance's cool-down reads it).
func (c Change) SQLFormat(schema string, format int) (string, []any) {
	t := func(name string) string { return ident.Table(schema, name) }
	switch c.Op {
	case OpSetStatus:
		t, w, a := refWhere(schema, c.Ref)
		return "UPDATE " + t + " SET status = ? WHERE " + w, append([]any{c.Status}, a...)
	case OpRepoint:
		t, w, a := refWhere(schema, c.Ref)
		stamp := ""
		if c.Ref.Kind == List && format >= 2 {
			stamp = ", moved_at = UTC_TIMESTAMP(3)"
		}
		return "UPDATE " + t + " SET shard_id = ?" + stamp + " WHERE " + w, append([]any{c.ShardID}, a...)
	case OpSetPolicy:
		d := c.Policy == PolicyDedicated
		return "INSERT INTO " + t("shard_policies") + " (shard_id, dedicated, updated_at) VALUES (?, ?, UTC_TIMESTAMP(3)) ON DUPLICATE KEY UPDATE dedicated = ?, updated_at = UTC_TIMESTAMP(3)", []any{c.ShardID, d, d}
	case OpRemoveMapping, OpMergeRange:
		t, w, a := refWhere(schema, c.Ref)
		return "DELETE FROM " + t + " WHERE " + w, a
	case OpSplitRange:
		col := "lower_bound"
		if c.At.Type == keyspace.StringKey {
			col = "lower_bound_str"
		}
		// The new mapping inherits the shard and status of the range it splits.
		return "INSERT INTO " + t("ranges") + " (func_id, " + col + ", shard_id, status) SELECT func_id, ?, shard_id, status FROM " + t("ranges") +
			" WHERE func_id = ? AND " + col + " <= ? ORDER BY " + col + " DESC LIMIT 1", []any{c.At.Value(), c.Ref.FuncID, c.At.Value()}
	case OpAddHashPoint:
		return "INSERT INTO " + t("hashes") + " (func_id, hash, shard_id, status) VALUES (?, ?, ?, ?)", []any{c.Ref.FuncID, c.Ref.Hash, c.ShardID, c.Status}
	case OpMoveLocation:
		return "UPDATE " + t("locations") + " SET host = ?, port = ? WHERE shard_id = ?", []any{c.Host, c.Port, c.ShardID}
	case OpRemoveLocation:
		return "DELETE FROM " + t("locations") + " WHERE shard_id = ?", []any{c.ShardID}
	case OpAddLocation:
		return "INSERT INTO " + t("locations") + " (host, port, schema_name) VALUES (?, ?, ?)", []any{c.Host, c.Port, c.Schema}
	}
	return "-- unknown change " + c.Op, nil
}

// Describe is a one-line account of the change for logs and plans.
func (c Change) Describe() string {
	ref := ""
	switch {
	case c.Ref.Lower != nil:
		ref = fmt.Sprintf("range of function %d from %s", c.Ref.FuncID, c.Ref.Lower)
	case c.Ref.Hash != "":
		ref = fmt.Sprintf("hash point %s of function %d", c.Ref.Hash, c.Ref.FuncID)
	case len(c.Ref.Points) > 0:
		ref = fmt.Sprintf("list keys %s of function %d", describeKeys(c.Ref.Points), c.Ref.FuncID)
	case c.Ref.Point != nil:
		ref = fmt.Sprintf("list key %s of function %d", c.Ref.Point, c.Ref.FuncID)
	}
	switch c.Op {
	case OpSetStatus:
		return "mark " + ref + " " + c.Status
	case OpRepoint:
		return fmt.Sprintf("re-point %s to shard %d", ref, c.ShardID)
	case OpSplitRange:
		return fmt.Sprintf("split the range of function %d at %s", c.Ref.FuncID, c.At)
	case OpMergeRange:
		return "merge " + ref + " into the range below it"
	case OpAddHashPoint:
		return fmt.Sprintf("add %s for shard %d (%s)", ref, c.ShardID, c.Status)
	case OpRemoveMapping:
		return "remove " + ref
	case OpMoveLocation:
		return fmt.Sprintf("move shard %d's location to %s:%d", c.ShardID, c.Host, c.Port)
	case OpRemoveLocation:
		return fmt.Sprintf("remove shard %d's location", c.ShardID)
	case OpAddLocation:
		return fmt.Sprintf("register a new shard on %s:%d, schema %s", c.Host, c.Port, c.Schema)
	case OpSetPolicy:
		return fmt.Sprintf("mark shard %d %s", c.ShardID, c.Policy)
	}
	return c.Op
}

// describeKeys names keys as runs and counts the rest (keyspace.Runs).
func describeKeys(ks []keyspace.Key) string { return keyspace.Runs(ks, 4) }

// Render prints a statement with its arguments inlined, for people to read
// (dry runs and plans). It is never executed.
func Render(query string, args []any) string {
	var b strings.Builder
	i := 0
	for _, r := range query {
		if r == '?' && i < len(args) {
			switch v := args[i].(type) {
			case string:
				b.WriteString("'" + strings.ReplaceAll(v, "'", "''") + "'")
			default:
				fmt.Fprint(&b, v)
			}
			i++
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// refWhere renders the WHERE of one mapping row and its table.
func refWhere(schema string, ref Ref) (table, where string, args []any) {
	switch ref.Kind {
	case Range:
		if ref.Lower.Type == keyspace.StringKey {
			return ident.Table(schema, "ranges"), "func_id = ? AND lower_bound_str = ?", []any{ref.FuncID, ref.Lower.Str}
		}
		return ident.Table(schema, "ranges"), "func_id = ? AND lower_bound = ?", []any{ref.FuncID, ref.Lower.Int}
	case Hash:
		return ident.Table(schema, "hashes"), "func_id = ? AND hash = ?", []any{ref.FuncID, ref.Hash}
	}
	keys := ref.Keys()
	col := "point"
	if len(keys) > 0 && keys[0].Type == keyspace.StringKey {
		col = "point_str"
	}
	args = []any{ref.FuncID}
	for _, k := range keys {
		args = append(args, k.Value())
	}
	if len(keys) == 1 {
		return ident.Table(schema, "list_points"), "func_id = ? AND " + col + " = ?", args
	}
	return ident.Table(schema, "list_points"), "func_id = ? AND " + col + " IN (?" + strings.Repeat(", ?", len(keys)-1) + ")", args
}
