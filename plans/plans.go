// Package plans is the plan file: what an operation will do, written before
// anything changes, saved after every step, and read back to resume. A plan
// holds addresses but never credentials. Files are written atomically (temp
// file, fsync, rename), mode 0600, with a SHA-256 checksum so a damaged or
// hand-edited file is refused. Reading and printing a plan needs no database.
package plans

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/schemaobj/objdef"
	"github.com/shardctl/shardctl/shardmap/mapdef"
	"github.com/shardctl/shardctl/tables/tabledef"
	"github.com/shardctl/shardctl/watermark"
)

// FormatVersion is the plan file format this build reads and writes.
const FormatVersion = 1

const magic = "shardctl-plan"

// ErrDamaged marks a plan file that fails its checksum or cannot be parsed.
var ErrDamaged = errors.New("plan file damaged")

// Step names, in order.
const (
	StepPreflight = "preflight"
	StepCreate    = "create"
	StepCopy      = "copy"
	StepCatchup   = "catchup"
	StepVerify    = "verify"
	StepFence     = "fence"
	StepCutover   = "cutover"
	StepCleanup   = "cleanup"
)

// Steps is every step in order.
var Steps = []string{StepPreflight, StepCreate, StepCopy, StepCatchup, StepVerify, StepFence, StepCutover, StepCleanup}

// Step states.
const (
	Pending = "pending"
	Running = "running"
	Done    = "done"
	Failed  = "failed"
	Skipped = "skipped"
)

// Plan states.
const (
	StateNew     = "new"
	StateRunning = "running"
	StateStopped = "stopped" // interrupted or failed part-way: resumable
	StateDone    = "done"
	StateAborted = "aborted"
)

// Endpoint is one side of an operation: a shard's schema on a server.
type Endpoint struct {
	ShardID int    `json:"shard_id,omitempty"`
	Host    string `json:"host"`
	Port    int    `json:"port"`
	Schema  string `json:"schema"`
}

// Addr renders host:port.
func (e Endpoint) Addr() string { return fmt.Sprintf("%s:%d", e.Host, e.Port) }

// Position is a binlog file and offset.
type Position struct {
	File string `json:"file"`
	Pos  uint32 `json:"pos"`
	// GTID set at this point and the server that wrote File (see binlog.Position).
	GTID   string `json:"gtid,omitempty"`
	Server string `json:"server,omitempty"`
}

// IsZero reports an unset position.
func (p Position) IsZero() bool { return p.File == "" }

func (p Position) String() string { return fmt.Sprintf("%s:%d", p.File, p.Pos) }

// PruneMarks are the cleanup watermarks by table. In a plan file a prune
// mark counts its rows under "deleted" (a copy mark under "rows"), as plan
// files always have.
type PruneMarks map[string]watermark.Mark

type pruneMarkJSON struct {
	After   []string `json:"after,omitempty"`
	Done    bool     `json:"done"`
	Deleted int64    `json:"deleted"`
}

// MarshalJSON writes each mark's Rows as "deleted".
func (m PruneMarks) MarshalJSON() ([]byte, error) {
	out := make(map[string]pruneMarkJSON, len(m))
	for t, w := range m {
		out[t] = pruneMarkJSON{After: w.After, Done: w.Done, Deleted: w.Rows}
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads "deleted" into each mark's Rows.
func (m *PruneMarks) UnmarshalJSON(b []byte) error {
	var in map[string]pruneMarkJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	if in == nil {
		*m = nil
		return nil
	}
	*m = make(PruneMarks, len(in))
	for t, w := range in {
		(*m)[t] = watermark.Mark{After: w.After, Done: w.Done, Rows: w.Deleted}
	}
	return nil
}

// Millis is a duration a plan file stores as whole milliseconds (its JSON is
// a plain number, as before); D converts it for use.
type Millis int

// D is m as a time.Duration.
func (m Millis) D() time.Duration { return time.Duration(m) * time.Millisecond }

// MillisOf is d in whole milliseconds (rounded down).
func MillisOf(d time.Duration) Millis { return Millis(d / time.Millisecond) }

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

// Owned is the keys one shard owned under one partition function.
type Owned struct {
	ShardID int             `json:"shard_id"`
	FuncID  int             `json:"func_id"`
	Keys    keyspace.Filter `json:"keys"`
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
	// key range in shardctl: pipeline/fkdata.go).
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

// Plan is one move, split or merge.
type Plan struct {
	FormatVersion int               `json:"format_version"`
	ID            string            `json:"id"`
	Operation     string            `json:"operation"` // move, split, merge
	Summary       string            `json:"summary"`
	CreatedAt     time.Time         `json:"created_at"`
	UpdatedAt     time.Time         `json:"updated_at"`
	State         string            `json:"state"`
	Revision      int64             `json:"revision,omitempty"` // counts saves: of two copies (file, sharding database) the higher is the later
	Args          map[string]string `json:"args"`

	ShardMap Endpoint `json:"shardmap"` // where the sharding database lives (ShardID unused)
	Source   Endpoint `json:"source"`
	Target   Endpoint `json:"target"`
	Locks    []string `json:"locks"` // lock names held while the plan runs

	// What the operation does: rows to copy and tail, rows to fence, the
	// shard-map changes of each phase, and what cleanup removes.
	Copy             []tabledef.Table `json:"copy"`
	Fence            []FenceTable     `json:"fence"`
	Prepare          []mapdef.Change  `json:"prepare,omitempty"` // at create: new location (split)
	Offline          []mapdef.Change  `json:"offline"`
	Cutover          []mapdef.Change  `json:"cutover"`
	Cleanup          []tabledef.Table `json:"cleanup"` // Filter = rows deleted on the source
	DropSourceSchema bool             `json:"drop_source_schema"`
	AfterCleanup     []mapdef.Change  `json:"after_cleanup,omitempty"`
	KeepSource       bool             `json:"keep_source"`
	Abort            []mapdef.Change  `json:"abort,omitempty"`        // undo of prepare/offline before cutover
	AbortTarget      []tabledef.Table `json:"abort_target,omitempty"` // rows removed from the target on abort (merge)
	DropTargetSchema bool             `json:"drop_target_schema"`     // on abort (move, split)
	// Objects are the source schema's views, triggers, routines and events,
	// created on the target at create (triggers guarded, events disabled)
	// and made exact at cutover (docs/schema-objects.md).
	Objects []objdef.Object `json:"objects,omitempty"`
	// TargetTriggers are a merge target's own triggers on the copied tables,
	// as they were before create swapped them for guarded ones; cutover and
	// abort put them back.
	TargetTriggers []objdef.Object `json:"target_triggers,omitempty"`
	// SourceTriggers are the source's triggers on the cleaned-up tables:
	// guarded while cleanup deletes rows, then put back.
	SourceTriggers []objdef.Object `json:"source_triggers,omitempty"`
	Options        Options         `json:"options"`
	SQLPreview     []string        `json:"shardmap_sql,omitempty"` // the statements run against the shard map, for review
	Against        *Against        `json:"against,omitempty"`      // the shard map the plan was made against (apply, resume and abort refuse a stale plan)
	AbortKept      []string        `json:"abort_kept,omitempty"`   // what an abort of a stale plan left in place, and why
	// KeyChecks are the foreign keys without the shard key a split read the
	// rows of, at planning and again before the fence (docs/schemas.md).
	KeyChecks []KeyCheck `json:"key_checks,omitempty"`
	// Collisions is a merge's last scan for rows both shards hold.
	Collisions *CollisionScan `json:"collision_scan,omitempty"`

	// Watched are the replicas whose lag the run throttles on, as planning
	// found them: under the source or under the target.
	Watched []WatchedReplica `json:"watched_replicas,omitempty"`

	Steps       []StepRecord `json:"steps"`
	Checkpoints Checkpoints  `json:"checkpoints"`
	Attempts    []Attempt    `json:"cutover_attempts,omitempty"`
	Result      Result       `json:"result"`
	Window      *Window      `json:"window,omitempty"` // reverse-replication window after cutover (window.go)
	DDL         []DDL        `json:"ddl_carried,omitempty"`
}

// WatchedReplica is a replica --max-lag watches and the side it replicates
// from: "source" or "target".
type WatchedReplica struct {
	Addr string `json:"addr"`
	Side string `json:"side"`
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

// New starts a plan with every step pending.
func New(op, summary string) *Plan {
	now := time.Now().UTC()
	p := &Plan{FormatVersion: FormatVersion, Operation: op, Summary: summary, CreatedAt: now, UpdatedAt: now, State: StateNew, Args: map[string]string{}, Options: DefaultOptions()}
	p.ID = fmt.Sprintf("%s-%s", op, now.Format("20060102T150405.000Z"))
	p.ID = strings.ReplaceAll(p.ID, ".", "")
	for _, s := range Steps {
		p.Steps = append(p.Steps, StepRecord{Name: s, State: Pending})
	}
	p.Checkpoints.Copy = map[string]watermark.Mark{}
	p.Checkpoints.Prune = PruneMarks{}
	return p
}

// Step returns the record of step name.
func (p *Plan) Step(name string) *StepRecord {
	for i := range p.Steps {
		if p.Steps[i].Name == name {
			return &p.Steps[i]
		}
	}
	return nil
}

// Done reports whether step name has finished.
func (p *Plan) Done(name string) bool {
	s := p.Step(name)
	return s != nil && (s.State == Done || s.State == Skipped)
}

// consistent checks what every run keeps true, so a plan whose state was
// edited (and the checksum computed again) is not taken at its word: steps
// finish in order, a new plan has started none, a done plan finished all.
func (p *Plan) consistent() error {
	switch p.State {
	case StateNew, StateRunning, StateStopped, StateDone, StateAborted:
	default:
		return fmt.Errorf("unknown state %q", p.State)
	}
	open := ""
	for _, s := range p.Steps {
		finished := s.State == Done || s.State == Skipped
		switch {
		case p.State == StateNew && (s.State != Pending || s.Attempts > 0):
			return fmt.Errorf("state new, but step %s is %s", s.Name, s.State)
		case p.State == StateDone && !finished:
			return fmt.Errorf("state done, but step %s is %s", s.Name, s.State)
		case finished && open != "":
			return fmt.Errorf("step %s is %s before step %s finished", s.Name, s.State, open)
		case !finished && open == "":
			open = s.Name
		}
	}
	return nil
}

// Untouched reports whether no step that changes anything has started: at
// most the preflight, which only reads, has run. A refused run of such a plan
// leaves nothing behind worth resuming or aborting.
func (p *Plan) Untouched() bool {
	for _, s := range p.Steps {
		if s.Name != StepPreflight && (s.State != Pending || s.Attempts > 0) {
			return false
		}
	}
	return true
}

// CutOver reports whether the shard map already points at the target.
func (p *Plan) CutOver() bool { return p.Done(StepCutover) }

// envelope is the file's outer layer; Plan is kept as raw bytes so the
// checksum is over exactly what is stored.
type envelope struct {
	Format   string          `json:"format"`
	Checksum string          `json:"checksum"`
	Plan     json.RawMessage `json:"plan"`
}

// Marshal renders the plan file's bytes.
func Marshal(p *Plan) ([]byte, error) {
	// The checksum covers the plan's compact JSON, so layout changes are harmless and content changes are caught.
	body, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(body)
	return json.MarshalIndent(envelope{Format: magic, Checksum: "sha256:" + hex.EncodeToString(sum[:]), Plan: body}, "", "  ")
}

// Unmarshal parses and checks a plan file's bytes.
func Unmarshal(b []byte) (*Plan, error) {
	var env envelope
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, fmt.Errorf("%w: not a plan file (%v)", ErrDamaged, err)
	}
	if env.Format != magic {
		return nil, fmt.Errorf("%w: not a shardctl plan file", ErrDamaged)
	}
	sum := sha256.Sum256(compact(env.Plan))
	if env.Checksum != "sha256:"+hex.EncodeToString(sum[:]) {
		return nil, fmt.Errorf("%w: checksum mismatch (the file was edited or damaged); restore it or abort the operation by hand", ErrDamaged)
	}
	var p Plan
	dec := json.NewDecoder(bytes.NewReader(env.Plan))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDamaged, err)
	}
	if p.FormatVersion != FormatVersion {
		return nil, fmt.Errorf("plan format %d: this shardctl reads format %d; use the shardctl version that wrote it", p.FormatVersion, FormatVersion)
	}
	if err := p.consistent(); err != nil {
		return nil, fmt.Errorf("%w: plan %s: %v (the file was edited and signed again, or damaged); restore it or abort the operation by hand", ErrDamaged, p.ID, err)
	}
	// Empty checkpoint maps are omitted from the file; a resumed run writes to them.
	if p.Checkpoints.Copy == nil {
		p.Checkpoints.Copy = map[string]watermark.Mark{}
	}
	if p.Checkpoints.Prune == nil {
		p.Checkpoints.Prune = PruneMarks{}
	}
	return &p, nil
}

func compact(raw []byte) []byte {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return raw
	}
	return buf.Bytes()
}

// Save writes the plan atomically: temp file in the same directory, fsync, rename, fsync the directory.
func Save(path string, p *Plan) error {
	p.UpdatedAt = time.Now().UTC()
	p.Revision++
	b, err := Marshal(p)
	if err != nil {
		return err
	}
	if err := WriteAtomic(path, b); err != nil {
		return fmt.Errorf("save plan: %w", err)
	}
	return nil
}

// WriteAtomic writes b to path (mode 0600) so that a crash leaves either
// the old file or the new one: a temporary file, fsync, rename, fsync of the
// directory.
func WriteAtomic(path string, b []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("directory %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".plan-*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// Load reads and checks a plan file.
func Load(path string) (*Plan, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read plan %s: %w", path, err)
	}
	p, err := Unmarshal(b)
	if err != nil {
		return nil, fmt.Errorf("plan %s: %w", path, err)
	}
	return p, nil
}

// Path is where plan id lives in dir.
func Path(dir, id string) string { return filepath.Join(dir, id+".json") }

// Resolve accepts a plan id or a path.
func Resolve(dir, ref string) string {
	if strings.ContainsRune(ref, os.PathSeparator) || strings.HasSuffix(ref, ".json") {
		return ref
	}
	return Path(dir, ref)
}

// Entry is one plan in a listing.
type Entry struct {
	ID        string    `json:"id"`
	Path      string    `json:"path"`
	Operation string    `json:"operation"`
	Summary   string    `json:"summary"`
	State     string    `json:"state"`
	Step      string    `json:"step"` // the first step not done
	UpdatedAt time.Time `json:"updated_at"`
	Error     string    `json:"error,omitempty"`

	Window *WindowInfo `json:"window,omitempty"` // a reverse window, for cron
}

// List reads every plan in dir, newest first; damaged files are listed with their error.
func List(dir string) ([]Entry, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, n := range names {
		e := Entry{Path: n, ID: strings.TrimSuffix(filepath.Base(n), ".json")}
		p, err := Load(n)
		if err != nil {
			e.Error = err.Error()
		} else {
			e.Operation, e.Summary, e.State, e.UpdatedAt = p.Operation, p.Summary, p.State, p.UpdatedAt
			e.Step = p.NextStep()
			e.Window = p.Window.Info(p)
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UpdatedAt.After(out[j].UpdatedAt) })
	return out, nil
}

// NextStep is the first step that is not done, or "" when all are.
func (p *Plan) NextStep() string {
	for _, s := range p.Steps {
		if s.State != Done && s.State != Skipped {
			return s.Name
		}
	}
	return ""
}
