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

	"github.com/shardctl/shardctl/schemaobj/objdef"
	"github.com/shardctl/shardctl/shardmap/mapdef"
	"github.com/shardctl/shardctl/tables/tabledef"
	"github.com/shardctl/shardctl/watermark"
	"github.com/shardctl/shardctl/xflavor"
)

// FormatVersion is the plan file format this build writes. It reads
// format 1 too: format 2 records a shard's owned LIST points as a count and
// a digest (Owned), where format 1 listed each; a format 1 plan is
// converted as it is read and saved as format 2.
const FormatVersion = 2

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
	// RunBy is the process that last took the plan's locks to run, abort
	// or revert it ("pid N on HOST"): a process that waited for them while
	// it worked is told who changed the plan under it.
	RunBy string `json:"run_by,omitempty"`

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
	// Translations are the changes the table definitions and objects get on
	// a target of the other flavor (MariaDB ⇄ MySQL), found at planning; the
	// Objects above are already translated (docs/servers.md).
	Translations []xflavor.Translation `json:"translations,omitempty"`
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
	// MovingKeys are a key move's keys (a LIST point, or a range) with the
	// rows each had over the sharded tables at planning.
	MovingKeys []KeyRows `json:"moving_keys,omitempty"`
	// Collisions is a merge's last scan for rows both shards hold.
	Collisions *CollisionScan `json:"collision_scan,omitempty"`
	// Counters are the copied tables with an AUTO_INCREMENT column, read
	// at planning, so nothing behind the fence asks information_schema
	// which tables have one (nil: a plan made before they were recorded;
	// empty: none); a merge's also say where the target's are raised.
	Counters []Counter `json:"counters"`

	// Watched are the replicas whose lag the run throttles on, as planning
	// found them: under the source or under the target.
	Watched []WatchedReplica `json:"watched_replicas,omitempty"`

	Steps       []StepRecord `json:"steps"`
	Checkpoints Checkpoints  `json:"checkpoints"`
	Attempts    []Attempt    `json:"cutover_attempts,omitempty"`
	Result      Result       `json:"result"`
	Window      *Window      `json:"window,omitempty"` // reverse-replication window after cutover (pipeline/window)
	DDL         []DDL        `json:"ddl_carried,omitempty"`
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

// Marshal renders the plan file's bytes.
func Marshal(p *Plan) ([]byte, error) {
	return Seal(magic, "plan", p)
}

// Clone is a deep copy of p for a save made outside the lock that guards
// p: plain JSON, without the file's seal, indent and checks (they are the
// save's), which cost a run as much as the save itself.
func Clone(p *Plan) (*Plan, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	var q Plan
	if err := json.Unmarshal(b, &q); err != nil {
		return nil, err
	}
	return &q, nil
}

// Unmarshal parses and checks a plan file's bytes.
func Unmarshal(b []byte) (*Plan, error) {
	body, err := Unseal(b, magic, "plan")
	if err != nil {
		return nil, fmt.Errorf("%w: %v; restore it or abort the operation by hand", ErrDamaged, err)
	}
	var p Plan
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDamaged, err)
	}
	if p.FormatVersion < 1 || p.FormatVersion > FormatVersion {
		return nil, fmt.Errorf("plan format %d: this shardctl reads formats 1 to %d; use the shardctl version that wrote it", p.FormatVersion, FormatVersion)
	}
	if err := p.consistent(); err != nil {
		return nil, fmt.Errorf("%w: plan %s: %v (the file was edited and signed again, or damaged); restore it or abort the operation by hand", ErrDamaged, p.ID, err)
	}
	if p.Against != nil {
		for i := range p.Against.Owned {
			p.Against.Owned[i].fold()
		}
	}
	p.FormatVersion = FormatVersion
	// Empty checkpoint maps are omitted from the file; a resumed run writes to them.
	if p.Checkpoints.Copy == nil {
		p.Checkpoints.Copy = map[string]watermark.Mark{}
	}
	if p.Checkpoints.Prune == nil {
		p.Checkpoints.Prune = PruneMarks{}
	}
	return &p, nil
}

// Seal renders v as a file that refuses to be taken at its word once
// edited or damaged: {"format": format, "checksum": "sha256:…", field: v},
// the checksum over v's compact JSON, so layout changes are harmless and
// content changes are caught. Plan files and verify checkpoints are sealed.
func Seal(format, field string, v any) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(body)
	// Built by hand to keep the keys in this order (a map would sort
	// them); marshalling a string cannot fail.
	str := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	raw := `{"format":` + str(format) + `,"checksum":` + str("sha256:"+hex.EncodeToString(sum[:])) + `,` + str(field) + `:` + string(body) + `}`
	var out bytes.Buffer
	if err := json.Indent(&out, []byte(raw), "", "  "); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// Unseal returns the content Seal(format, field, …) wrote, refusing a file
// of another format or one whose content fails its checksum. Its errors
// say what is wrong, not what to do: that is the caller's to add.
func Unseal(b []byte, format, field string) (json.RawMessage, error) {
	var env map[string]json.RawMessage
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, fmt.Errorf("not a %s file (%v)", field, err)
	}
	var got, sum string
	if json.Unmarshal(env["format"], &got) != nil || got != format {
		return nil, fmt.Errorf("not a shardctl %s file", field)
	}
	want := sha256.Sum256(compact(env[field]))
	if json.Unmarshal(env["checksum"], &sum) != nil || sum != "sha256:"+hex.EncodeToString(want[:]) {
		return nil, errors.New("checksum mismatch (the file was edited or damaged)")
	}
	return env[field], nil
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
	return Write(path, p)
}

// Write writes p as it is, its revision and time unchanged, atomically as
// Save does: a copy of a plan made elsewhere (the plans table's) written
// over an earlier file is then the same revision in both places.
func Write(path string, p *Plan) error {
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

// AtStep is where the plan stands, for messages: "step NAME", or, with every
// step done and the end not recorded (a process killed past its last step),
// that instead of an empty name (issue 53).
func (p *Plan) AtStep() string {
	if s := p.NextStep(); s != "" {
		return "step " + s
	}
	return "the end of its last step (every step done; its end is not recorded yet)"
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
