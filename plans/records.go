package plans

// The records a plan carries besides its steps: the fence, what the plan
// was made against, each step's times, what a split or merge found in the
// rows, counters, cutover attempts, checkpoints and the result.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/watermark"
)

// FenceTable is a source table whose moving rows are fenced at cutover.
type FenceTable struct {
	Name   string          `json:"name"`
	Filter keyspace.Filter `json:"filter"`
}

// Against is what a plan was made against: the shard map version and the
// keys its shards owned then (per partition function).
type Against struct {
	Version int64   `json:"version"`
	Owned   []Owned `json:"owned"`
}

// Owned is the keys one shard owned under one partition function: its
// ranges and arcs in Keys, its LIST points as their count and digest. Every
// save writes the plan whole, several of them inside the blackout: one key
// per tenant made a 100,000-tenant shard's plan megabytes, and its blackout
// grow with the tenants. Plans made before recorded each point in
// Keys.Points; Unmarshal folds them into Points and Digest.
type Owned struct {
	ShardID int             `json:"shard_id"`
	FuncID  int             `json:"func_id"`
	Keys    keyspace.Filter `json:"keys"`
	Points  int             `json:"points,omitempty"`
	Digest  string          `json:"points_digest,omitempty"`
}

// OwnedOf is what shard id owns under function fn, the filter f's points
// folded into a count and a digest.
func OwnedOf(id, fn int, f keyspace.Filter) Owned {
	o := Owned{ShardID: id, FuncID: fn, Keys: f}
	o.fold()
	return o
}

// fold moves o.Keys.Points into Points and Digest (once: a folded Owned
// has none left).
func (o *Owned) fold() {
	if len(o.Keys.Points) == 0 {
		return
	}
	o.Points, o.Digest = len(o.Keys.Points), PointsDigest(o.Keys.Points)
	o.Keys.Points = nil
}

// PointsDigest is a digest of a set of keys that does not depend on their
// order: the SHA-256 of the sorted keys, each with its type and length.
func PointsDigest(pts []keyspace.Key) string {
	ks := slices.Clone(pts)
	slices.SortFunc(ks, func(a, b keyspace.Key) int { return a.Compare(b) })
	h := sha256.New()
	for _, k := range ks {
		v := k.String()
		fmt.Fprintf(h, "%s %d:%s,", k.Type, len(v), v) // length-prefixed: any byte may be in a key
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// StepRecord is one step's state and times.
type StepRecord struct {
	Name     string    `json:"name"`
	State    string    `json:"state"`
	Started  time.Time `json:"started,omitempty"`
	Ended    time.Time `json:"ended,omitempty"`
	Error    string    `json:"error,omitempty"`
	Attempts int       `json:"attempts,omitempty"`
	// Throttled says why the running step waits right now (a replica that
	// lags or cannot be read, the control file's pause), "" while it goes.
	Throttled string `json:"throttled,omitempty"`
}

// KeyCheck is what a split found when it read the rows of a foreign key
// that does not carry the shard key: how many child rows it read, and how
// many would end on the other side of the split point from their parent.
type KeyCheck struct {
	Key      string    `json:"key"`  // child.name (cols) -> parent (cols)
	When     string    `json:"when"` // planning, or the step that checked again
	At       time.Time `json:"at"`
	Rows     int64     `json:"rows"`               // child rows read
	Leaving  int64     `json:"leaving,omitempty"`  // children that move while their parent stays
	Orphaned int64     `json:"orphaned,omitempty"` // children that stay while their parent moves
	// Joined counts the chunks the server joined (the rest were matched by
	// key range in shardctl: pipeline/fkcheck/fkdata.go).
	Joined int64 `json:"joined_chunks,omitempty"`
}

// CollisionScan is a merge's scan of its keys for rows both shards hold:
// the binlog positions of both servers just before it read a row (a scan
// at apply or resume is skipped while both servers are still there: nothing
// was written since), and the keys it scanned or skipped.
type CollisionScan struct {
	At      time.Time `json:"at"`
	Source  string    `json:"source_position,omitempty"`
	Target  string    `json:"target_position,omitempty"`
	Scanned []string  `json:"scanned,omitempty"`
	Skipped []string  `json:"skipped,omitempty"` // keys carrying the shard column, with no row of the target in the merged range: none can collide
	// Here is set by the process that scanned: a run that follows its own
	// planning (merge --yes) does not scan again moments later.
	Here bool `json:"-"`
}

// Counter is a copied table's AUTO_INCREMENT counter (docs/split-merge.md).
type Counter struct {
	Table  string `json:"table"`
	Column string `json:"column"`
	Max    uint64 `json:"max"`              // the column type's largest value
	Source uint64 `json:"source,omitempty"` // the source's counter at planning
	Target uint64 `json:"target,omitempty"` // a merge target's counter at planning
	// RaiseTo is where a merge or a key move raises the target's counter
	// before the copy: the source's counter plus Margin, above every id the
	// source can issue until the cutover (0: no raise, the target's is
	// there already). Margin is kept for every counter whose ids can meet
	// (0: none can, or the servers interleave ids). Create recomputes the
	// raise from the live counters (the same margin) and sets Raised once
	// it is done, and Guard: the target's counter then, which the source's
	// must stay below until the cutover.
	RaiseTo uint64 `json:"raise_to,omitempty"`
	Margin  uint64 `json:"margin,omitempty"`
	Raised  bool   `json:"raised,omitempty"`
	Guard   uint64 `json:"guard,omitempty"`
	// Interleaved: the two servers issue ids from disjoint residue classes
	// (auto_increment_increment/offset), so nothing is raised or carried.
	Interleaved bool `json:"interleaved,omitempty"`
	// Warning says the counter after the operation is past half its
	// column type's largest value.
	Warning string `json:"warning,omitempty"`
}

// Attempt is one cutover attempt: the fence and how long writes were blocked.
type Attempt struct {
	Started   time.Time          `json:"started"`
	BlackoutM float64            `json:"blackout_ms"`
	Phases    map[string]float64 `json:"phases_ms,omitempty"` // where the blackout went: offline, fence, final, cutover
	Result    string             `json:"result"`
	// Blockers are the sessions that held locks on fenced tables when the
	// attempt could not take its own within the budget (blockers.go).
	Blockers []Blocker `json:"blockers,omitempty"`
}

// Checkpoints are the durable progress marks a resume starts from.
type Checkpoints struct {
	Start   Position                  `json:"start,omitempty"`   // binlog position recorded before the copy
	Applied Position                  `json:"applied,omitempty"` // last position the target committed
	Final   Position                  `json:"final,omitempty"`   // source position read after the fence held
	Copy    map[string]watermark.Mark `json:"copy,omitempty"`
	// Deferred are verify chunks that kept changing under writes; they are
	// compared again behind the fence, where the source is still.
	Deferred []watermark.Range `json:"deferred_verify,omitempty"`
	Prune    PruneMarks        `json:"prune,omitempty"`
	// PruneScope is, by table, how many rows the cleanup had to delete,
	// counted before its first delete: the rows a crash deleted after the
	// last saved mark are gone from the source, and a resume counts them
	// as this minus what is left.
	PruneScope map[string]int64 `json:"prune_scope,omitempty"`
}

// Result sums up a finished (or stopped) run for people and scripts.
type Result struct {
	RowsCopied    int64              `json:"rows_copied"`
	EventsApplied int64              `json:"events_applied"`
	RowsVerified  int64              `json:"rows_verified"`
	RowsDeleted   int64              `json:"rows_deleted"`
	BlackoutMS    float64            `json:"blackout_ms"`
	StepSeconds   map[string]float64 `json:"step_seconds,omitempty"`
}

// KeyRows is one moving key (or range) and its rows at planning.
type KeyRows struct {
	Key  string `json:"key"`
	Rows int64  `json:"rows"`
}

// DDL is a schema change of a copied table that the tail carried past
// (--on-ddl apply or ignore).
type DDL struct {
	At        time.Time `json:"at"`
	Position  Position  `json:"position"` // the source's binlog boundary before it
	Table     string    `json:"table"`
	Statement string    `json:"statement"`     // as the source ran it
	Ran       string    `json:"ran,omitempty"` // as run on the target (apply)
	Mode      string    `json:"mode"`
	Note      string    `json:"note,omitempty"`
}

// WatchedReplica is a replica --max-lag watches and the side it replicates
// from: "source" or "target".
type WatchedReplica struct {
	Addr string `json:"addr"`
	Side string `json:"side"`
}
