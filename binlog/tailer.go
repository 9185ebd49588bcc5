package binlog

import (
	"context"
	"crypto/tls"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/canal"
	"github.com/go-mysql-org/go-mysql/mysql"
	gsql "github.com/go-sql-driver/mysql"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/schemaobj"
	"github.com/shardctl/shardctl/tables"
)

// DefaultBatchRows is the default number of row changes per target transaction.
const DefaultBatchRows = 2000

// Config says what to tail and where to apply it.
type Config struct {
	Source       dbutil.Addr
	Creds        dbutil.Creds // never printed
	Schema       string       // source schema
	Target       *sql.DB      // target server pool (dbutil.Open: interpolated parameters)
	TargetSchema string
	Tables       []tables.Table // only these are applied; each Table.Filter selects the rows in scope
	ServerID     uint32         // replica id, unique among the source's replicas and binlog clients
	Start        Position       // an event-group boundary, recorded before the copy started
	BatchRows    int            // max row changes per target transaction (default 2000)
	// Checkpoint is called after the target committed everything up to p; p
	// is always a source transaction boundary. An error stops the tail.
	Checkpoint func(ctx context.Context, p Position) error
	Logger     *slog.Logger // optional; canal's own messages appear only from Warn up
	// NoFlushBinlog stops WaitFor from running FLUSH BINARY LOGS on the
	// source. WaitFor uses it when the tail is idle but short of the target
	// position, which happens when the binlog ends in events canal reports no
	// position for (a new file's header, CREATE TRIGGER): the rotation gives
	// a position past them. Needs the RELOAD privilege.
	NoFlushBinlog bool
	// Throttle, if set, is called before each target transaction and may
	// sleep (it slows the apply under load on the target or its replicas).
	Throttle func(ctx context.Context) error
	// SessionSQL runs on the applier's target session after its own
	// settings (a reverse tail passes the fence with fence.BypassSQL).
	SessionSQL []string
	// Cascading names the tables whose deletes cascade to other rows
	// (tables.CascadingParents): their deletes are repeated with foreign
	// key checks on.
	Cascading map[string]bool
}

// Stats are counters of a running tail.
type Stats struct {
	Events        int64     `json:"events"`          // row events and transaction ends read for the tail
	RowsApplied   int64     `json:"rows_applied"`    // row changes committed on the target
	RowsSkipped   int64     `json:"rows_skipped"`    // row changes of listed tables outside the filter
	Transactions  int64     `json:"transactions"`    // source transactions seen (all schemas)
	Batches       int64     `json:"batches"`         // target transactions committed
	Applied       Position  `json:"applied"`         // see Tailer.Applied
	LastEventTime time.Time `json:"last_event_time"` // source commit time of the last applied transaction
}

type itemKind uint8

const (
	itemRows     itemKind = iota + 1 // row actions of one rows event
	itemBoundary                     // end of an event group at pos
	itemStop                         // no more items; err says why
)

// item travels from canal's handler to the applier.
type item struct {
	kind itemKind
	acts []action
	pos  Position
	when time.Time
	txn  bool // the boundary ends a transaction (not a rotation)
	err  error
}

// Tailer is a running binlog tail.
type Tailer struct {
	cfg    Config
	log    *slog.Logger
	tables map[string]*tables.Table
	src    *sql.DB
	flavor dbutil.Flavor // the source's
	server string        // the source's identity (ServerIdentity)
	byGTID bool          // the start was recorded on another server: start from its GTID set
	tls    *tls.Config   // the binlog reader's TLS (nil: plain)
	canal  *canal.Canal
	h      *handler
	baseFP string
	lim    limits
	linger time.Duration

	ch     chan item
	ctx    context.Context // applier database work; cancelled once everything stopped
	cancel context.CancelFunc
	conn   *sql.Conn // applier's target session; only the applier touches it

	mu              sync.Mutex // guards the fields below up to the blank line
	applied         Position
	appliedAt       time.Time
	lastEventTime   time.Time
	progress        chan struct{} // closed and replaced whenever applied moves
	rowsApplied     int64
	transactions    int64
	batches         int64
	err             error
	checkpointed    Position
	checkpointAt    time.Time
	lastBinlogFlush time.Time
	flushWarned     bool

	events, skipped atomic.Int64
	lastEvent       atomic.Int64 // unix nanos of the last canal callback
	stopping        atomic.Bool
	closeOnce       sync.Once
	canalClosed     chan struct{} // canal.Close returned
	runDone         chan struct{} // the reader goroutine ended
	applierDone     chan struct{} // the applier ended
	done            chan struct{} // all of it, connections released
}

var errApplierStopped = errors.New("binlog tail applier stopped")

// Start validates cfg, checks that the listed tables still have their
// planned columns and that cfg.Start is not purged, takes one connection of
// cfg.Target for itself, and starts tailing from cfg.Start. ctx bounds the
// tail's whole life, not only the start: cancelling it stops the tail like
// Stop, with ctx's error.
func Start(ctx context.Context, cfg Config) (*Tailer, error) {
	if err := validate(&cfg); err != nil {
		return nil, err
	}
	t := &Tailer{
		cfg:          cfg,
		log:          cfg.Logger,
		tables:       make(map[string]*tables.Table, len(cfg.Tables)),
		linger:       5 * time.Millisecond,
		ch:           make(chan item, 4096),
		applied:      cfg.Start,
		appliedAt:    time.Now(),
		checkpointed: cfg.Start,
		progress:     make(chan struct{}),
		canalClosed:  make(chan struct{}),
		runDone:      make(chan struct{}),
		applierDone:  make(chan struct{}),
		done:         make(chan struct{}),
	}
	for i := range cfg.Tables {
		t.tables[cfg.Tables[i].Name] = &cfg.Tables[i]
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	ok := false
	defer func() {
		if !ok {
			t.cancel()
			if t.conn != nil {
				discard(t.conn)
			}
			if t.src != nil {
				t.src.Close()
			}
		}
	}()
	if err := t.prepareSource(ctx); err != nil {
		return nil, err
	}
	if err := t.prepareTarget(ctx); err != nil {
		return nil, err
	}
	if err := t.newCanal(); err != nil {
		return nil, err
	}
	ok = true
	go t.run()
	go t.applyLoop()
	go func() {
		<-t.applierDone
		t.closeCanal()
		<-t.runDone
		<-t.canalClosed
		if t.conn != nil {
			discard(t.conn)
		}
		t.src.Close()
		t.cancel()
		close(t.done)
	}()
	go func() {
		select {
		case <-ctx.Done():
			t.requestStop(fmt.Errorf("binlog tail of %s: %w", cfg.Schema, ctx.Err()))
		case <-t.done:
		}
	}()
	t.log.Info("binlog tail started", "schema", cfg.Schema, "source", cfg.Source.String(), "from", cfg.Start.String(), "tables", len(cfg.Tables))
	return t, nil
}

func validate(cfg *Config) error {
	switch {
	case cfg.Schema == "":
		return errors.New("binlog tail: no source schema given")
	case cfg.Target == nil:
		return fmt.Errorf("binlog tail of %s: no target server given", cfg.Schema)
	case cfg.TargetSchema == "":
		return fmt.Errorf("binlog tail of %s: no target schema given", cfg.Schema)
	case len(cfg.Tables) == 0:
		return fmt.Errorf("binlog tail of %s: no tables listed", cfg.Schema)
	case cfg.ServerID == 0:
		return fmt.Errorf("binlog tail of %s: server id 0 is reserved; give a unique replica server id", cfg.Schema)
	case cfg.Start.IsZero():
		return fmt.Errorf("binlog tail of %s: no start position given", cfg.Schema)
	case cfg.Source.Host == "" || cfg.Source.Port == 0:
		return fmt.Errorf("binlog tail of %s: no source server address given", cfg.Schema)
	}
	if cfg.BatchRows <= 0 {
		cfg.BatchRows = DefaultBatchRows
	}
	cfg.Tables = append([]tables.Table(nil), cfg.Tables...) // the caller may reuse its slice
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	seen := map[string]bool{}
	for _, tb := range cfg.Tables {
		if seen[tb.Name] {
			return fmt.Errorf("binlog tail of %s: table %s listed twice", cfg.Schema, tb.Name)
		}
		seen[tb.Name] = true
		if len(tb.Columns) == 0 {
			return fmt.Errorf("binlog tail of %s: table %s has no column list", cfg.Schema, tb.Name)
		}
		if len(tb.PK) == 0 {
			return fmt.Errorf("binlog tail of %s: table %s has no primary key; rows cannot be applied idempotently without one", cfg.Schema, tb.Name)
		}
		for _, pk := range tb.PK {
			if indexOf(tb.Columns, pk) < 0 {
				return fmt.Errorf("binlog tail of %s: table %s: primary key column %q is not in its column list", cfg.Schema, tb.Name, pk)
			}
		}
		if !tb.Filter.All() && indexOf(tb.Columns, tb.Filter.Column) < 0 {
			return fmt.Errorf("binlog tail of %s: table %s: filter column %q is not in its column list", cfg.Schema, tb.Name, tb.Filter.Column)
		}
	}
	return nil
}

func (t *Tailer) prepareSource(ctx context.Context) error {
	s := t.cfg.Schema
	db, err := dbutil.Open(ctx, t.cfg.Source, t.cfg.Creds, "")
	if err != nil {
		return fmt.Errorf("binlog tail of %s: source: %w", s, err)
	}
	db.SetMaxOpenConns(2)
	t.src = db
	if t.flavor, err = dbutil.FlavorOf(ctx, db); err != nil {
		return fmt.Errorf("binlog tail of %s: source: %w", s, err)
	}
	if t.tls, err = binlogTLS(ctx, db, t.cfg.Source.Host); err != nil {
		return fmt.Errorf("binlog tail of %s: source: %w", s, err)
	}
	if t.server, err = ServerIdentity(ctx, db); err != nil {
		return fmt.Errorf("binlog tail of %s: source: %w", s, err)
	}
	if st := t.cfg.Start; st.Server != "" && st.Server != t.server {
		// A failover: the start's File:Pos mean nothing here, its GTID set does.
		if st.GTID == "" {
			return fmt.Errorf("binlog tail of %s: %w", s, ErrNoGTID)
		}
		t.byGTID = true
		t.applied, t.checkpointed = Position{}, Position{}
	}
	var format, image string
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.binlog_format, @@GLOBAL.binlog_row_image").Scan(&format, &image); err != nil {
		return fmt.Errorf("binlog tail of %s: read the source's binlog settings: %w", s, err)
	}
	if format != "ROW" || image != "FULL" {
		return fmt.Errorf("binlog tail of %s: the source %s logs binlog_format=%s binlog_row_image=%s; an online move needs ROW and FULL",
			s, t.cfg.Source, format, image)
	}
	purged, err := Purged(ctx, db, t.cfg.Start)
	if err != nil {
		return fmt.Errorf("binlog tail of %s: check the start position %s: %w", s, t.cfg.Start, err)
	}
	if purged {
		return fmt.Errorf("binlog tail of %s: the start position %s is in a binlog file the source %s has already purged; the changes since then are lost to the tail, so the operation must start over with a fresh copy (and a longer binlog retention)",
			s, t.cfg.Start, t.cfg.Source)
	}
	if t.baseFP, err = schemaFingerprint(ctx, db, s); err != nil {
		return fmt.Errorf("binlog tail of %s: read the source schema: %w", s, err)
	}
	return t.checkPlannedColumns(ctx)
}

// checkPlannedColumns refuses to start when a listed table's columns are no
// longer the planned ones: canal decodes old events with the current
// definition, so a change made while no tail ran would shift values silently.
func (t *Tailer) checkPlannedColumns(ctx context.Context) error {
	s := t.cfg.Schema
	cols := map[string][]string{}
	var tn, cn string
	err := dbutil.ScanEach(ctx, t.src, `SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = ? ORDER BY TABLE_NAME, ORDINAL_POSITION`, []any{s}, []any{&tn, &cn}, func() error {
		cols[tn] = append(cols[tn], cn)
		return nil
	})
	if err != nil {
		return fmt.Errorf("binlog tail of %s: read the source columns: %w", s, err)
	}
	for _, tb := range t.cfg.Tables {
		have, ok := cols[tb.Name]
		if !ok {
			return fmt.Errorf("binlog tail of %s: table %s.%s no longer exists on the source: %w; re-plan and restart the operation", s, s, tb.Name, ErrDDL)
		}
		same := len(have) == len(tb.Columns)
		for i := 0; same && i < len(have); i++ {
			same = strings.EqualFold(have[i], tb.Columns[i])
		}
		if !same {
			return fmt.Errorf("binlog tail of %s: table %s.%s now has columns (%s), the operation was planned with (%s): %w; re-plan and restart the operation",
				s, s, tb.Name, strings.Join(have, ", "), strings.Join(tb.Columns, ", "), ErrDDL)
		}
	}
	return nil
}

func (t *Tailer) prepareTarget(ctx context.Context) error {
	if _, err := t.target(ctx); err != nil {
		return err
	}
	var maxPacket int
	if err := t.conn.QueryRowContext(ctx, "SELECT @@max_allowed_packet").Scan(&maxPacket); err != nil {
		return fmt.Errorf("binlog tail of %s: target: %w", t.cfg.Schema, err)
	}
	t.lim = limits{rows: 1000, bytes: min(maxPacket/2, 16<<20)}
	for _, tb := range t.cfg.Tables {
		q := "SELECT 1 FROM " + dbutil.Table(t.cfg.TargetSchema, tb.Name) + " LIMIT 0"
		rows, err := t.conn.QueryContext(ctx, q)
		if err != nil {
			return fmt.Errorf("binlog tail of %s: target table %s.%s: %w", t.cfg.Schema, t.cfg.TargetSchema, tb.Name, err)
		}
		rows.Close()
	}
	return nil
}

// target returns the applier's session on the target, opening it if needed.
// The session writes rows as replication does: strict (a value that does not
// fit is an error, not a silent truncation), explicit zero ids kept, UTC for
// TIMESTAMP text, and no foreign key checks (a replay passes through states
// where a parent is not there yet).
func (t *Tailer) target(ctx context.Context) (*sql.Conn, error) {
	if t.conn != nil {
		return t.conn, nil
	}
	c, err := t.cfg.Target.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("binlog tail of %s: connect to the target: %w", t.cfg.Schema, err)
	}
	for _, q := range []string{
		"SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION'",
		"SET SESSION time_zone = '+00:00'",
		"SET SESSION foreign_key_checks = 0",
		schemaobj.SkipSQL, // guarded triggers on the target do not fire on applied rows
	} {
		if _, err := c.ExecContext(ctx, q); err != nil {
			discard(c)
			return nil, fmt.Errorf("binlog tail of %s: target session (%s): %w", t.cfg.Schema, q, err)
		}
	}
	for _, q := range t.cfg.SessionSQL {
		if _, err := c.ExecContext(ctx, q); err != nil {
			discard(c)
			return nil, fmt.Errorf("binlog tail of %s: target session (%s): %w", t.cfg.Schema, q, err)
		}
	}
	t.conn = c
	return c, nil
}

// discard closes c without returning it to the pool: its session variables
// are not what other users of the pool expect.
func discard(c *sql.Conn) {
	_ = c.Raw(func(any) error { return driver.ErrBadConn })
	_ = c.Close()
}

func (t *Tailer) newCanal() error {
	cc := canal.NewDefaultConfig()
	cc.Addr = t.cfg.Source.String()
	cc.User = t.cfg.Creds.User
	cc.Password = t.cfg.Creds.Password
	cc.Charset = "utf8mb4"
	cc.Flavor = t.flavor.Name()
	cc.TLSConfig = t.tls
	cc.ServerID = t.cfg.ServerID
	cc.HeartbeatPeriod = time.Second
	cc.ReadTimeout = 3 * time.Second
	cc.MaxReconnectAttempts = 30
	cc.Dump.ExecutionPath = ""
	cc.UseDecimal = false // decimals as exact text
	cc.ParseTime = false  // temporal values as text, sent back as they were
	cc.TimestampStringLocation = time.UTC
	for _, tb := range t.cfg.Tables {
		cc.IncludeTableRegex = append(cc.IncludeTableRegex, "^"+regexp.QuoteMeta(t.cfg.Schema+"."+tb.Name)+"$")
	}
	t.h = &handler{t: t, file: t.cfg.Start.File, last: t.cfg.Start, shapes: map[string]*shape{}}
	if t.byGTID {
		t.h.file, t.h.last = "", Position{}
	}
	if t.cfg.Start.GTID != "" {
		g, err := mysql.ParseGTIDSet(t.flavor.Name(), t.cfg.Start.GTID)
		if err != nil {
			return fmt.Errorf("binlog tail of %s: start GTID set %q: %w", t.cfg.Schema, t.cfg.Start.GTID, err)
		}
		t.h.gtid = g
	}
	cc.Logger = slog.New(&canalLog{
		next:       t.log.Handler().WithAttrs([]slog.Attr{slog.String("component", "canal")}),
		quiet:      func() bool { return t.stopping.Load() || t.h.failed() != nil }, // the tail reports its own error
		onUnparsed: t.h.onUnparsed,
	})
	c, err := canal.NewCanal(cc)
	if err != nil {
		return dbutil.Redact(fmt.Errorf("binlog tail of %s: connect the binlog reader to %s: %w", t.cfg.Schema, t.cfg.Source, err), t.cfg.Creds.Password)
	}
	c.SetEventHandler(t.h)
	t.canal = c
	// Load the listed tables' definitions now, while they are known to match
	// the plan: canal otherwise reads them at the first row event, and a table
	// dropped by then would leave the rows before the DROP undecodable.
	for _, tb := range t.cfg.Tables {
		if _, err := c.GetTable(t.cfg.Schema, tb.Name); err != nil {
			c.Close()
			return dbutil.Redact(fmt.Errorf("binlog tail of %s: read the definition of %s.%s: %w", t.cfg.Schema, t.cfg.Schema, tb.Name, err), t.cfg.Creds.Password)
		}
	}
	return nil
}

// run reads the binlog until canal stops, then tells the applier why.
func (t *Tailer) run() {
	defer close(t.runDone)
	var err error
	if t.byGTID {
		err = t.canal.StartFromGTID(t.h.gtid.Clone())
	} else {
		err = t.canal.RunFrom(mysql.Position{Name: t.cfg.Start.File, Pos: t.cfg.Start.Pos})
	}
	switch herr := t.h.failed(); {
	case herr != nil:
		err = herr
	case t.stopping.Load():
		err = nil
	case err == nil:
		err = fmt.Errorf("binlog tail of %s: the binlog reader stopped on its own", t.cfg.Schema)
	default:
		err = dbutil.Redact(fmt.Errorf("binlog tail of %s: reading the binlog of %s: %w", t.cfg.Schema, t.cfg.Source, err), t.cfg.Creds.Password)
	}
	_ = t.push(item{kind: itemStop, err: err})
}

// push hands an item to the applier, in order; it fails once the applier is gone.
func (t *Tailer) push(it item) error {
	select {
	case t.ch <- it:
		return nil
	case <-t.applierDone:
		return errApplierStopped
	}
}

func (t *Tailer) touch() { t.lastEvent.Store(time.Now().UnixNano()) }

// closeCanal closes canal once, in the background: Close waits for the
// binlog reader, which may be waiting for the goroutine that asks.
func (t *Tailer) closeCanal() {
	t.closeOnce.Do(func() {
		go func() {
			t.canal.Close()
			close(t.canalClosed)
		}()
	})
}

// requestStop begins a graceful stop; reason (may be nil) becomes the
// tail's error unless an earlier one is set.
func (t *Tailer) requestStop(reason error) {
	if reason != nil {
		t.setErr(reason)
	}
	t.stopping.Store(true)
	t.closeCanal()
}

func (t *Tailer) setErr(err error) {
	if err == nil {
		return
	}
	t.mu.Lock()
	if t.err == nil {
		t.err = err
	}
	t.mu.Unlock()
}

// Applied is the last position whose changes are all committed on the
// target (a transaction boundary; the start position until the first one).
func (t *Tailer) Applied() Position {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.applied
}

// Stats returns a snapshot of the counters.
func (t *Tailer) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return Stats{
		Events:        t.events.Load(),
		RowsApplied:   t.rowsApplied,
		RowsSkipped:   t.skipped.Load(),
		Transactions:  t.transactions,
		Batches:       t.batches,
		Applied:       t.applied,
		LastEventTime: t.lastEventTime,
	}
}

// Done is closed when the tail has stopped (error or Stop) and released its connections.
func (t *Tailer) Done() <-chan struct{} { return t.done }

// Err is the first error, nil while running or after a clean Stop.
func (t *Tailer) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// Stop stops reading, commits the complete transactions already read,
// checkpoints, waits for everything to finish and returns Err. A transaction
// cut by the stop is left for the next tail, which replays it.
func (t *Tailer) Stop() error {
	t.requestStop(nil)
	<-t.done
	return t.Err()
}

// WaitFor blocks until Applied() >= p, the tail stops, or ctx ends.
func (t *Tailer) WaitFor(ctx context.Context, p Position) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		t.mu.Lock()
		applied, progress := t.applied, t.progress
		t.mu.Unlock()
		if applied.Compare(p) >= 0 {
			return nil
		}
		select {
		case <-t.done:
			if t.Applied().Compare(p) >= 0 {
				return nil
			}
			if err := t.Err(); err != nil {
				return err
			}
			return fmt.Errorf("binlog tail of %s stopped at %s before reaching %s", t.cfg.Schema, t.Applied(), p)
		case <-ctx.Done():
			return fmt.Errorf("binlog tail of %s: waiting for %s (applied %s): %w", t.cfg.Schema, p, t.Applied(), ctx.Err())
		case <-progress:
		case <-tick.C:
			if t.idle() {
				if ok, err := onlyHousekeeping(ctx, t.src, applied, p); err == nil && ok {
					// Nothing but housekeeping lies between: p is reached.
					if err := t.advance(p, time.Time{}, false); err != nil {
						return err
					}
					return nil
				}
			}
			t.nudge(ctx)
		}
	}
}

// idle reports that nothing received is waiting to be applied.
func (t *Tailer) idle() bool {
	return len(t.ch) == 0 && time.Since(time.Unix(0, t.lastEvent.Load())) > 50*time.Millisecond
}

// housekeeping are binlog events that carry no data: a tail that applied
// everything before them has applied everything before the position after them.
var housekeeping = map[string]bool{
	"Format_desc": true, "Gtid_list": true, "Binlog_checkpoint": true, "Rotate": true,
	"Start_encryption": true, "Stop": true, "Heartbeat": true, "Previous_gtids": true,
}

// onlyHousekeeping reads the source's binlog from `from` up to `to` and
// reports whether every event in between is housekeeping. An idle server's
// position sits after such events (a new file's header, a checkpoint), which
// canal never reports as a position; this tells the tail it has caught up
// without waiting for the next transaction.
func onlyHousekeeping(ctx context.Context, src *sql.DB, from, to Position) (bool, error) {
	if from.IsZero() || from.Compare(to) >= 0 {
		return true, nil
	}
	files, err := BinaryLogs(ctx, src)
	if err != nil {
		return false, err
	}
	budget := 200 // a longer stretch means real traffic: let the tail catch up
	file, pos := from.File, from.Pos
	for {
		rows, err := src.QueryContext(ctx, "SHOW BINLOG EVENTS IN ? FROM ? LIMIT ?", file, pos, budget)
		if err != nil {
			return false, err
		}
		for rows.Next() {
			var name, typ string
			var at uint64
			var serverID, end, info any
			if err := rows.Scan(&name, &at, &typ, &serverID, &end, &info); err != nil {
				rows.Close()
				return false, err
			}
			if (Position{File: name, Pos: uint32(at)}).Compare(to) >= 0 {
				rows.Close()
				return true, nil
			}
			if !housekeeping[typ] {
				rows.Close()
				return false, nil
			}
			budget--
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return false, err
		}
		if file == to.File {
			return true, nil
		}
		if budget <= 0 {
			return false, nil
		}
		next := ""
		for i, f := range files {
			if f == file && i+1 < len(files) {
				next = files[i+1]
			}
		}
		if next == "" {
			return false, nil
		}
		file, pos = next, 4
	}
}

// nudge rotates the source binlog when the tail is idle but short of the
// position waited for: the events at the end of the log carry no position
// canal reports (a new file's header, statements it cannot parse such as
// CREATE TRIGGER), and the rotate event does.
func (t *Tailer) nudge(ctx context.Context) {
	if t.cfg.NoFlushBinlog {
		return
	}
	const idle = 500 * time.Millisecond
	t.mu.Lock()
	due := time.Since(t.appliedAt) > idle && time.Since(t.lastBinlogFlush) > 2*time.Second
	if due {
		t.lastBinlogFlush = time.Now()
	}
	t.mu.Unlock()
	if !due || time.Since(time.Unix(0, t.lastEvent.Load())) < idle || len(t.ch) > 0 {
		return
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := t.src.ExecContext(fctx, "FLUSH BINARY LOGS"); err != nil {
		t.mu.Lock()
		warned := t.flushWarned
		t.flushWarned = true
		t.mu.Unlock()
		if !warned {
			t.log.Warn("binlog tail: cannot rotate the source binlog to move past its last events; waiting for the next transaction instead",
				"schema", t.cfg.Schema, "error", err)
		}
	}
}

// batch is the applier's pending work.
type batch struct {
	acts    []action
	covered int      // acts[:covered] end at a source transaction boundary
	pos     Position // that boundary
	when    time.Time
}

func (t *Tailer) applyLoop() {
	err := t.apply()
	t.setErr(err)
	close(t.applierDone)
}

// apply batches row actions and commits them in target transactions of at
// most BatchRows, at source transaction boundaries whenever one is in the
// batch. It commits as soon as nothing more is waiting (after a short
// linger), so an idle stream is never held back to fill a batch.
func (t *Tailer) apply() error {
	var b batch
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		var it item
		if b.covered > 0 {
			select {
			case it = <-t.ch:
			default:
				timer.Reset(t.linger)
				select {
				case it = <-t.ch:
					timer.Stop()
				case <-timer.C:
					if err := t.commitCovered(&b); err != nil {
						return err
					}
					continue
				}
			}
		} else {
			it = <-t.ch
		}
		switch it.kind {
		case itemRows:
			b.acts = append(b.acts, it.acts...)
			for len(b.acts) >= t.cfg.BatchRows {
				if b.covered > 0 {
					if err := t.commitCovered(&b); err != nil {
						return err
					}
					continue
				}
				// One source transaction larger than a batch: commit its head;
				// the position waits for its end.
				if err := t.commit(b.acts[:t.cfg.BatchRows]); err != nil {
					return err
				}
				b.acts = append([]action(nil), b.acts[t.cfg.BatchRows:]...)
			}
		case itemBoundary:
			t.mu.Lock()
			if it.txn {
				t.transactions++
			}
			t.mu.Unlock()
			if len(b.acts) == 0 {
				if err := t.advance(it.pos, it.when, false); err != nil {
					return err
				}
				continue
			}
			b.covered, b.pos, b.when = len(b.acts), it.pos, it.when
		case itemStop:
			if err := t.commitCovered(&b); err != nil {
				return errors.Join(it.err, err)
			}
			if err := t.finalCheckpoint(); err != nil {
				return errors.Join(it.err, err)
			}
			return it.err
		}
	}
}

// commitCovered commits the actions up to the batch's boundary and moves
// Applied there; actions of a transaction still being read stay pending.
func (t *Tailer) commitCovered(b *batch) error {
	if b.covered == 0 {
		return nil
	}
	for i := 0; i < b.covered; i += t.cfg.BatchRows {
		if err := t.commit(b.acts[i:min(b.covered, i+t.cfg.BatchRows)]); err != nil {
			return err
		}
	}
	rest := b.acts[b.covered:]
	b.acts = append(make([]action, 0, max(len(rest), 64)), rest...)
	b.covered = 0
	return t.advance(b.pos, b.when, true)
}

// commit applies acts in one target transaction, retrying lock timeouts,
// deadlocks and lost connections (every statement is idempotent).
func (t *Tailer) commit(acts []action) error {
	if t.cfg.Throttle != nil {
		if err := t.cfg.Throttle(t.ctx); err != nil {
			return err
		}
	}
	stmts := buildStatements(acts, t.lim)
	var err error
	for attempt := 0; ; attempt++ {
		if err = t.execTx(stmts); err == nil {
			break
		}
		retry := dbutil.IsRetryableLockErr(err) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, gsql.ErrInvalidConn)
		if !retry || attempt == 4 {
			return err
		}
		if t.conn != nil && !dbutil.IsRetryableLockErr(err) {
			discard(t.conn)
			t.conn = nil
		}
		select {
		case <-time.After(time.Duration(100<<attempt) * time.Millisecond):
		case <-t.ctx.Done():
			return err
		}
	}
	n := int64(0)
	for _, a := range acts {
		if a.count {
			n++
		}
	}
	t.mu.Lock()
	t.rowsApplied += n
	t.batches++
	t.mu.Unlock()
	return nil
}

func (t *Tailer) execTx(stmts []stmt) error {
	conn, err := t.target(t.ctx)
	if err != nil {
		return err
	}
	tx, err := conn.BeginTx(t.ctx, nil)
	if err != nil {
		return fmt.Errorf("binlog tail of %s: begin on the target: %w", t.cfg.Schema, err)
	}
	for _, s := range stmts {
		if s.cascade {
			if err := t.execCascade(tx, s); err != nil {
				_ = tx.Rollback()
				discard(conn) // its foreign_key_checks may be left on
				t.conn = nil
				return fmt.Errorf("binlog tail of %s: apply a cascading delete to %s: %w", t.cfg.Schema, s.table, err)
			}
			continue
		}
		if _, err := tx.ExecContext(t.ctx, s.sql, s.args...); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("binlog tail of %s: apply to %s: %w", t.cfg.Schema, s.table, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("binlog tail of %s: commit on the target: %w", t.cfg.Schema, err)
	}
	return nil
}

// execCascade runs a parent's delete so the target's InnoDB repeats the
// source's ON DELETE CASCADE / SET NULL: the parent's image first (checks
// off: its own parents may not be there yet), then the delete with checks on.
func (t *Tailer) execCascade(tx *sql.Tx, s stmt) error {
	for _, q := range []struct {
		sql  string
		args []any
	}{{s.pre, s.preArgs}, {"SET SESSION foreign_key_checks = 1", nil}, {s.sql, s.args}, {"SET SESSION foreign_key_checks = 0", nil}} {
		if _, err := tx.ExecContext(t.ctx, q.sql, q.args...); err != nil {
			return err
		}
	}
	return nil
}

// advance moves Applied to p (everything before it is on the target) and
// checkpoints: after every commit, and at most once a second when only
// other tables' transactions went by.
func (t *Tailer) advance(p Position, when time.Time, committed bool) error {
	t.mu.Lock()
	if p.Compare(t.applied) > 0 {
		t.applied = p
		t.appliedAt = time.Now()
		close(t.progress)
		t.progress = make(chan struct{})
	}
	if !when.IsZero() {
		t.lastEventTime = when
	}
	due := committed || time.Since(t.checkpointAt) >= time.Second
	t.mu.Unlock()
	if due {
		return t.checkpoint(p)
	}
	return nil
}

func (t *Tailer) checkpoint(p Position) error {
	t.mu.Lock()
	if p.Compare(t.checkpointed) <= 0 {
		t.mu.Unlock()
		return nil
	}
	t.mu.Unlock()
	if t.cfg.Checkpoint != nil {
		if err := t.cfg.Checkpoint(t.ctx, p); err != nil {
			return fmt.Errorf("binlog tail of %s: checkpoint at %s: %w", t.cfg.Schema, p, err)
		}
	}
	t.mu.Lock()
	t.checkpointed = p
	t.checkpointAt = time.Now()
	t.mu.Unlock()
	return nil
}

func (t *Tailer) finalCheckpoint() error {
	return t.checkpoint(t.Applied())
}
