package binlog

import (
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/canal"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/schema"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/tables"
)

// DefaultBatchRows is the default number of row changes per target
// transaction. A batch keeps only each row's last change, so a backlog
// applies as fewer, larger statements: 10,000 ran the catch-up benchmark at
// 145k row events/s against 81k at 2,000 (docs/BENCHMARKS.md).
const DefaultBatchRows = 10000

// DefaultWorkers is the default number of target sessions that apply one
// batch's rows in parallel (commit.go: parallelApply).
const DefaultWorkers = 4

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
	BatchRows    int            // max row changes per target transaction (default DefaultBatchRows)
	Workers      int            // target sessions a large batch is spread over (default DefaultWorkers; 1: one session)
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
	// OnDDL is what a schema change of a listed table does: DDLStop (also
	// ""), DDLApply or DDLIgnore (carry.go). OnCarried is told of each one
	// carried, on the applier's goroutine, before the checkpoint after it.
	OnDDL     string
	OnCarried func(ctx context.Context, d CarriedDDL) error
	// IntoExisting: the target is an existing shard that keeps serving the
	// keys outside each table's filter (a merge, a key move). A change that
	// would replace or delete one of their rows is looked up first: an
	// upsert stops the tail with ErrForeignRow, a delete leaves it alone
	// (guard.go). Costs one indexed SELECT per statement of a filtered table.
	IntoExisting bool
	// IDGuards, by table: an incoming row whose AUTO_INCREMENT column holds
	// Guard or more stops the tail before it is applied (ErrIDGuard). A
	// merge or key move raised the target's counter to Guard so the
	// source's ids stay below it; a row at or above it would drag the
	// target's counter into the ids the source issues next.
	IDGuards map[string]IDGuard
}

// IDGuard is the id an AUTO_INCREMENT column's incoming rows stay below.
type IDGuard struct {
	Column string
	Guard  uint64
}

// Stats are counters of a running tail.
type Stats struct {
	Events        int64     `json:"events"`           // row events and transaction ends read for the tail
	RowsApplied   int64     `json:"rows_applied"`     // row changes committed on the target
	RowsSkipped   int64     `json:"rows_skipped"`     // row changes of listed tables outside the filter
	Transactions  int64     `json:"transactions"`     // source transactions seen (all schemas)
	Batches       int64     `json:"batches"`          // batches committed (a parallel batch is one)
	Parallel      int64     `json:"parallel_batches"` // batches spread over several target sessions
	LockRetries   int64     `json:"lock_retries"`     // target transactions retried after a deadlock or lock wait timeout
	Applied       Position  `json:"applied"`          // see Tailer.Applied
	LastEventTime time.Time `json:"last_event_time"`  // source commit time of the last applied transaction
}

type itemKind uint8

const (
	itemRows     itemKind = iota + 1 // row actions of a long event group, ahead of its boundary
	itemBoundary                     // end of an event group at pos, with its row actions
	itemStop                         // no more items; err says why
	itemDDL                          // a schema change carried (carry.go)
)

// item travels from canal's handler to the applier.
type item struct {
	kind itemKind
	acts []action
	pos  Position
	when time.Time
	txn  bool // the boundary ends a transaction (not a rotation)
	err  error
	ddl  *CarriedDDL
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
	// fromSet: the start was recorded here on MySQL, whose binary log status
	// may report a GTID set that lacks transactions just before its position
	// (committed in the same group, not yet counted: gtidhole.go). The tail
	// starts from the set all the same, and the transactions the server sends
	// from before the position join the set without being applied.
	fromSet bool
	tls     *tls.Config // the binlog reader's TLS (nil: plain)
	canal   *canal.Canal
	h       *handler
	baseFP  string
	lim     limits
	linger  time.Duration

	ch     chan item
	ctx    context.Context // applier database work; cancelled once everything stopped
	cancel context.CancelFunc
	// conns are the applier's target sessions, one per worker (conns[0]
	// applies whatever is not spread over the workers); only the applier
	// and the workers it runs touch them, each worker its own.
	conns []*sql.Conn
	// nontx are the target's tables on an engine without transactions
	// (MyISAM): their statements run after the batch's transaction, one by
	// one, since MySQL with GTIDs refuses them inside it (error 1785).
	nontx map[string]bool
	// shadowed are the tables whose row events canal decodes with the
	// target's definition (carry.go: shadow); set before canal starts, then
	// read and replaced on canal's goroutine only.
	shadowed map[string]*schema.Table

	mu              sync.Mutex // guards the fields below up to the blank line
	applied         Position
	appliedAt       time.Time
	lastEventTime   time.Time
	progress        chan struct{} // closed and replaced whenever applied moves
	rowsApplied     int64
	transactions    int64
	batches         int64
	parallelBatches int64
	err             error
	checkpointed    Position
	checkpointAt    time.Time
	lastBinlogFlush time.Time
	flushWarned     bool

	events, skipped atomic.Int64
	lockRetries     atomic.Int64 // target transactions retried after a lock wait timeout or deadlock
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
// planned columns (or, with OnDDL apply, reads a changed one with the
// target's definition: carry.go, shadow) and that cfg.Start is not purged, takes one connection of
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
	t.conns = make([]*sql.Conn, t.cfg.Workers)
	for i := range t.cfg.Tables { // validate copied them: a carried schema change replaces a table's columns
		t.tables[t.cfg.Tables[i].Name] = &t.cfg.Tables[i]
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	ok := false
	defer func() {
		if !ok {
			t.cancel()
			for w := range t.conns {
				t.dropSession(w)
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
		for w := range t.conns {
			t.dropSession(w)
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
	t.log.Debug("binlog tail start", "schema", cfg.Schema, "gtid", cfg.Start.GTID, "by_gtid", t.byGTID || t.fromSet)
	return t, nil
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
	// The read timeout, set per packet, is applied a few times a second
	// (lazyConn); the watchdog bounds what it does not cover: canal's own
	// queries (table definitions) have no read timeout.
	cc.Dialer = lazyDialer(dbutil.WatchedDialer(t.cfg.Creds))
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
	if t.fromSet {
		t.h.before = t.cfg.Start
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
		if def := t.shadowed[tb.Name]; def != nil {
			c.SetTableCache([]byte(t.cfg.Schema), []byte(tb.Name), def)
			continue
		}
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
	if t.byGTID || t.fromSet {
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
		Parallel:      t.parallelBatches,
		LockRetries:   t.lockRetries.Load(),
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
