package binlog

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/canal"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/go-mysql-org/go-mysql/schema"
	"github.com/pingcap/tidb/pkg/parser"

	"github.com/shardctl/shardctl/tables"
)

// handler receives canal's callbacks, all on canal's goroutine. It turns row
// events into target actions (filter and decision table applied here, so the
// applier only batches and writes), marks transaction boundaries, and stops
// the stream at a schema change of the source schema.
type handler struct {
	canal.DummyEventHandler
	t *Tailer

	file       string   // current binlog file, for messages
	last       Position // last boundary handed to the applier
	ddlGroup   bool     // the current event group's GTID event flags DDL
	ddlHandled bool     // canal reported the group's statement through OnDDL
	changed    [][2]string
	shapes     map[string]*shape // by table name, for the canal definition they were built from
	// pending are the row actions of the event group being read: they go to
	// the applier with the group's boundary (one channel send per source
	// transaction, not per rows event), or at maxPending for a long one.
	pending []action
	parser  *parser.Parser // for rename targets, made on first DDL
	gtid    mysql.GTIDSet  // GTIDs up to the last boundary; nil: the start carried none
	next    mysql.GTIDSet  // the current group's GTID, added to gtid at its end
	// before is the start position of a tail started from its GTID set on
	// the server that wrote the position (gtidhole.go); skip: the current
	// group lies before it, so only its GTID counts.
	before Position
	skip   bool
	// group is where the current group began (its GTID event), the place a
	// carried schema change is recorded at: the same on every run that reads
	// it, whether the tail started at a position or from a GTID set (then the
	// last boundary is the start of the file until a group ends).
	group Position

	mu  sync.Mutex
	err error // first fatal error; every later callback returns it
}

func (h *handler) String() string { return "shardctl binlog tail" }

func (h *handler) failed() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

func (h *handler) fail(err error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		h.err = err
	}
	return h.err
}

func (h *handler) schema() string { return h.t.cfg.Schema }

// shape returns the write shape of a listed table for canal's current
// definition, rebuilding it when canal reloaded the definition.
func (h *handler) shape(tb string, ct *schema.Table) (*shape, error) {
	if s := h.shapes[tb]; s != nil && s.canal == ct {
		return s, nil
	}
	s, err := newShape(h.t.tables[tb], ct, h.t.cfg.TargetSchema, h.t.cfg.Cascading[tb], h.t.cfg.IntoExisting)
	if err != nil {
		return nil, err
	}
	if g, ok := h.t.cfg.IDGuards[tb]; ok {
		if s.idIdx = indexOf(columnNames(ct), g.Column); s.idIdx >= 0 {
			s.idGuard = g.Guard
		}
	}
	h.shapes[tb] = s
	return s, nil
}

func (h *handler) OnRow(e *canal.RowsEvent) error {
	if err := h.failed(); err != nil {
		return err
	}
	h.t.touch()
	if h.skip || e.Table.Schema != h.schema() {
		return nil
	}
	tb := h.t.tables[e.Table.Name]
	if tb == nil {
		return nil // not listed (canal filters these already)
	}
	wrap := func(err error) error {
		at := h.file // formatted only for an error: this runs for every rows event
		if e.Header != nil {
			at = fmt.Sprintf("%s:%d", h.file, e.Header.LogPos-e.Header.EventSize)
		}
		return h.fail(fmt.Errorf("binlog tail of %s: table %s.%s, row event at %s: %w", h.schema(), h.schema(), tb.Name, at, err))
	}
	sh, err := h.shape(tb.Name, e.Table)
	if err != nil {
		return wrap(err)
	}
	h.t.events.Add(1)
	step := 1
	if e.Action == canal.UpdateAction {
		step = 2
		if len(e.Rows)%2 != 0 {
			return wrap(fmt.Errorf("update event with an odd number of row images (%d)", len(e.Rows)))
		}
	}
	acts := h.pending // appended to in place: an error fails the tail, whatever is pending
	var skipped int64
	for i := 0; i < len(e.Rows); i += step {
		var imgs [2][]any
		var in [2]bool
		for k := range step {
			raw := e.Rows[i+k]
			if len(raw) != len(sh.canal.Columns) {
				return wrap(fmt.Errorf("row image has %d values, the table has %d columns (the table changed after this event was written): %w",
					len(raw), len(sh.canal.Columns), ErrDDL))
			}
			if imgs[k], err = sh.normalize(raw); err != nil {
				return wrap(err)
			}
			if in[k], err = sh.inScope(tb, imgs[k]); err != nil {
				return wrap(err)
			}
		}
		switch e.Action {
		case canal.InsertAction:
			if in[0] {
				if err := sh.checkID(imgs[0]); err != nil {
					return wrap(err)
				}
				acts = append(acts, sh.upsert(imgs[0], true))
			} else {
				skipped++
			}
		case canal.DeleteAction:
			if in[0] {
				acts = append(acts, sh.rowDelete(imgs[0]))
			} else {
				skipped++
			}
		case canal.UpdateAction:
			del, up := planUpdate(in[0], in[1], sh.pkChanged(imgs[0], imgs[1]))
			if del {
				acts = append(acts, sh.delete(imgs[0], !up))
			}
			if up {
				if err := sh.checkID(imgs[1]); err != nil {
					return wrap(err)
				}
				acts = append(acts, sh.upsert(imgs[1], true))
			}
			if !del && !up {
				skipped++
			}
		default:
			return wrap(fmt.Errorf("unknown row action %q", e.Action))
		}
	}
	h.t.skipped.Add(skipped)
	h.pending = acts
	if len(h.pending) >= maxPending {
		return h.flush()
	}
	return nil
}

// maxPending bounds the row actions a long source transaction keeps in the
// handler before they stream on to the applier.
const maxPending = 1024

// flush hands the pending row actions to the applier.
func (h *handler) flush() error {
	if len(h.pending) == 0 {
		return nil
	}
	acts := h.pending
	h.pending = nil
	return h.t.push(item{kind: itemRows, acts: acts})
}

func (h *handler) OnGTID(header *replication.EventHeader, ev mysql.BinlogGTIDEvent) error {
	if err := h.failed(); err != nil {
		return err
	}
	h.t.touch()
	h.ddlGroup, h.ddlHandled, h.changed = false, false, nil
	if h.gtid != nil && h.next != nil {
		// The group before ended without a boundary: canal skips a statement
		// its parser cannot read (CREATE TRIGGER, CREATE PROCEDURE, ...)
		// without OnPosSynced. The tail is past it all the same; left out,
		// its GTID would be a hole in the checkpoint's set, and a resume by
		// GTID on another server would be sent it again.
		_ = h.gtid.Update(h.next.String())
	}
	h.next = nil
	if h.gtid != nil {
		if g, err := ev.GTIDNext(); err == nil {
			h.next = g
		}
	}
	h.skip = h.beforeStart(header)
	h.group = Position{}
	if header != nil && h.file != "" && header.LogPos >= header.EventSize {
		h.group = Position{File: h.file, Pos: header.LogPos - header.EventSize, Server: h.t.server}
		if h.gtid != nil {
			h.group.GTID = h.gtid.String()
		}
	}
	if g, ok := ev.(*replication.MariadbGTIDEvent); ok {
		h.ddlGroup = g.IsDDL()
	} else {
		// MySQL's GTID event carries no DDL flag: a group that ends in a
		// query event (not an XID) is a statement, checked like MariaDB's DDL.
		h.ddlGroup = true
	}
	return nil
}

func (h *handler) OnRotate(_ *replication.EventHeader, e *replication.RotateEvent) error {
	if err := h.failed(); err != nil {
		return err
	}
	h.file = string(e.NextLogName)
	return nil
}

// OnTableChanged comes before OnDDL, once per table the statement names.
func (h *handler) OnTableChanged(_ *replication.EventHeader, db, table string) error {
	if err := h.failed(); err != nil {
		return err
	}
	h.changed = append(h.changed, [2]string{db, table})
	return nil
}

// OnDDL stops the tail when the statement touches a table of the source
// schema, listed or not, including a table renamed into it (canal reports
// only the old name of a rename).
func (h *handler) OnDDL(header *replication.EventHeader, next mysql.Position, qe *replication.QueryEvent) error {
	if err := h.failed(); err != nil {
		return err
	}
	h.t.touch()
	h.ddlHandled = true
	changed := h.changed
	h.changed = nil
	if h.skip {
		return nil // before the start: the copy was taken after it
	}
	if h.parser == nil {
		h.parser = parser.New()
	}
	changed = append(changed, renameTargets(h.parser, string(qe.Query), string(qe.Schema))...)
	s := h.schema()
	for _, c := range changed {
		if strings.EqualFold(c[0], s) {
			at := fmt.Sprintf("at %s:%d", next.Name, header.LogPos-header.EventSize)
			if m := h.t.cfg.OnDDL; m == DDLApply || m == DDLIgnore {
				return h.carry(string(qe.Query), string(qe.Schema), at, m)
			}
			err := ddlError(s, c[1], string(qe.Query), at)
			if _, why := carry(h.parser, string(qe.Query), s, string(qe.Schema), h.t.tables); why == "" {
				err = fmt.Errorf("%w (%w)", err, ErrDDLCarriable)
			}
			return h.fail(err)
		}
	}
	return nil
}

// carry hands a schema change the tail may carry (--on-ddl apply|ignore) to
// the applier, with the table's new columns, or stops at one it may not.
func (h *handler) carry(query, defaultDB, at, mode string) error {
	s := h.schema()
	t, why := carry(h.parser, query, s, defaultDB, h.t.tables)
	if why != "" {
		return h.fail(fmt.Errorf("binlog tail of %s: %w %s: --on-ddl %s does not carry %s: %q; the tail stopped safely before it (the target has every change before it)",
			s, ErrDDL, at, mode, why, shorten(query, 300)))
	}
	if def := h.t.shadowed[t.Name]; def != nil && mode == DDLApply {
		return h.carryShadowed(t, query, at)
	}
	ct, err := h.t.canal.GetTable(s, t.Name)
	if err != nil {
		return h.fail(fmt.Errorf("binlog tail of %s: re-read %s.%s after the schema change %s: %w", s, s, t.Name, at, err))
	}
	cols := make([]string, len(ct.Columns))
	for i, c := range ct.Columns {
		cols[i] = c.Name
	}
	t.Columns = cols // rows after the statement are checked against these
	d := &CarriedDDL{Table: t.Name, Statement: query, Columns: cols, At: h.at(), Mode: mode}
	if mode == DDLApply {
		d.Ran = retarget(query, s, h.t.cfg.TargetSchema)
	}
	if err := h.flush(); err != nil {
		return err
	}
	return h.t.push(item{kind: itemDDL, ddl: d})
}

// carryShadowed carries a change of a shadowed table (Tailer.shadow): the
// source's current definition may already hold later changes, so the rows
// after this one are read with the target's definition once the applier ran
// it there. canal waits meanwhile; schema changes are rare.
func (h *handler) carryShadowed(t *tables.Table, query, at string) error {
	s := h.schema()
	d := &CarriedDDL{Table: t.Name, Statement: query, At: h.at(), Mode: DDLApply,
		Ran: retarget(query, s, h.t.cfg.TargetSchema), def: make(chan *schema.Table, 1)}
	if err := h.flush(); err != nil {
		return err
	}
	if err := h.t.push(item{kind: itemDDL, ddl: d}); err != nil {
		return err
	}
	select {
	case def := <-d.def:
		h.t.canal.SetTableCache([]byte(s), []byte(t.Name), def)
		h.t.shadowed[t.Name] = def
		t.Columns = d.Columns
		return nil
	case <-h.t.applierDone:
		return h.fail(fmt.Errorf("binlog tail of %s: stopped while carrying the schema change %s: %w", s, at, errApplierStopped))
	}
}

// OnPosSynced marks a transaction boundary (XID, COMMIT, DDL) or a rotation.
func (h *handler) OnPosSynced(header *replication.EventHeader, pos mysql.Position, _ mysql.GTIDSet, _ bool) error {
	if header == nil {
		return nil // canal's Close reports its last position; the applier already knows it
	}
	if err := h.failed(); err != nil {
		return err
	}
	h.t.touch()
	if header.EventType == replication.QUERY_EVENT && h.ddlGroup && !h.ddlHandled && !h.skip {
		// A DDL statement canal did not attribute to a table (DROP DATABASE,
		// CREATE VIEW, ...): check whether the schema changed.
		at := fmt.Sprintf("at %s:%d", pos.Name, header.LogPos-header.EventSize)
		if err := h.checkSchema("a schema statement not attributed to a table (for example DROP DATABASE)", at); err != nil {
			return h.fail(err)
		}
	}
	h.ddlGroup, h.ddlHandled, h.changed = false, false, nil
	if header.EventType != replication.ROTATE_EVENT {
		h.skip = false
	}
	p := Position{File: pos.Name, Pos: pos.Pos, Server: h.t.server}
	if h.gtid != nil {
		if h.next != nil && header.EventType != replication.ROTATE_EVENT {
			_ = h.gtid.Update(h.next.String())
			h.next = nil
		}
		p.GTID = h.gtid.String()
	}
	h.file, h.last, h.group = pos.Name, p, Position{}
	h.t.events.Add(1)
	acts := h.pending
	h.pending = nil
	return h.t.push(item{
		kind: itemBoundary,
		acts: acts,
		pos:  p,
		when: time.Unix(int64(header.Timestamp), 0),
		txn:  header.EventType != replication.ROTATE_EVENT,
	})
}

// OnTableNotFound: a row event of a listed table that no longer exists (the
// tail replays events written before a DROP or RENAME).
func (h *handler) OnTableNotFound(header *replication.EventHeader, e *replication.RowsEvent) error {
	if err := h.failed(); err != nil {
		return err
	}
	db, table := string(e.Table.Schema), string(e.Table.Table)
	if db != h.schema() {
		return nil
	}
	at := fmt.Sprintf("%s:%d", h.file, header.LogPos-header.EventSize)
	return h.fail(fmt.Errorf("binlog tail of %s: row event at %s for table %s.%s, which no longer exists on the source: %w; the tail stopped safely before applying it, re-plan and restart the operation",
		db, at, db, table, ErrDDL))
}

// onUnparsed is called (through canal's logger, on canal's goroutine) for a
// statement canal's parser skipped; MariaDB syntax such as ALTER ONLINE
// TABLE, CREATE OR REPLACE TABLE or ALGORITHM=NOCOPY lands here. A table
// statement naming the schema stops the tail; an unqualified one stops it if
// the schema's definition changed.
func (h *handler) onUnparsed(query string) {
	if h.skip || h.failed() != nil || !looksLikeDDL(query) || !touchesTables(query) {
		return
	}
	at := "after " + h.last.String()
	var err error
	if mentionsIdent(query, h.schema()) {
		err = ddlError(h.schema(), "", query, at)
	} else {
		err = h.checkSchema(query, at)
	}
	if err != nil {
		h.fail(err)
		h.t.requestStop(nil) // no callback may follow to carry the error
	}
}

// checkSchema returns a DDL error when the source schema's definition
// differs from the one taken at start. An unreadable schema is logged, not
// fatal: the next listed-table event still meets the column checks.
func (h *handler) checkSchema(statement, at string) error {
	ctx, cancel := context.WithTimeout(h.t.ctx, 10*time.Second)
	defer cancel()
	fp, err := schemaFingerprint(ctx, h.t.src, h.schema())
	if err != nil {
		h.t.log.Warn("binlog tail: could not re-read the source schema after a schema statement", "schema", h.schema(), "at", at, "error", err)
		return nil
	}
	if fp == h.t.baseFP {
		return nil
	}
	// The change may also come from a later statement the tail has not read
	// yet; stopping here is early, never late.
	return ddlError(h.schema(), "", statement, at+" (the schema's tables or columns differ from when the tail started)")
}

// at is where the group being read began: its GTID event, else the last boundary.
func (h *handler) at() Position {
	if !h.group.IsZero() {
		return h.group
	}
	return h.last
}
