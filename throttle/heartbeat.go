package throttle

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/shardctl/shardctl/dbutil"
)

// The heartbeat (pt-heartbeat's and gh-ost's approach): while a run watches
// replica lag, shardctl writes the time on the source and the target every
// beatEvery, one row per server_id, and each replica's lag is its own clock
// minus the time in the row of the server it replicates from. Unlike
// Seconds_Behind_Source it is sub-second and does not read 0 on an idle SQL
// thread far behind its IO thread. The row is deleted when the run ends;
// the schema and table stay (other runs may be writing theirs).
const (
	HeartbeatSchema = "shardctl"
	HeartbeatTable  = "heartbeat"
	beatEvery       = 100 * time.Millisecond
)

var heartbeatTable = dbutil.Table(HeartbeatSchema, HeartbeatTable)

// heartbeat writes the time on each of its servers until closed.
type heartbeat struct {
	dbs  []*sql.DB
	ids  []int64
	stop chan struct{}
	wg   sync.WaitGroup
}

// serverID reads a server's @@server_id.
func serverID(ctx context.Context, db *sql.DB) (int64, error) {
	var id int64
	if err := db.QueryRowContext(ctx, "SELECT @@server_id").Scan(&id); err != nil {
		return 0, fmt.Errorf("read @@server_id: %w", err)
	}
	return id, nil
}

// startHeartbeat creates the table where needed and starts writing on each
// of dbs (nil ones are skipped).
func startHeartbeat(ctx context.Context, dbs ...*sql.DB) (*heartbeat, error) {
	h := &heartbeat{stop: make(chan struct{})}
	for _, db := range dbs {
		if db == nil {
			continue
		}
		id, err := serverID(ctx, db)
		if err != nil {
			return nil, err
		}
		for _, s := range []string{
			"CREATE DATABASE IF NOT EXISTS " + dbutil.QuoteIdent(HeartbeatSchema),
			"CREATE TABLE IF NOT EXISTS " + heartbeatTable + " (server_id INT UNSIGNED NOT NULL PRIMARY KEY, ts DATETIME(6) NOT NULL) ENGINE=InnoDB",
		} {
			if _, err := db.ExecContext(ctx, s); err != nil {
				return nil, fmt.Errorf("heartbeat table %s: %w", heartbeatTable, err)
			}
		}
		if err := beat(ctx, db, id); err != nil {
			return nil, err
		}
		h.dbs, h.ids = append(h.dbs, db), append(h.ids, id)
	}
	for i := range h.dbs {
		h.wg.Add(1)
		go h.run(h.dbs[i], h.ids[i])
	}
	return h, nil
}

func beat(ctx context.Context, db *sql.DB, id int64) error {
	_, err := db.ExecContext(ctx, "INSERT INTO "+heartbeatTable+" (server_id, ts) VALUES (?, UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE ts = UTC_TIMESTAMP(6)", id)
	if err != nil {
		return fmt.Errorf("heartbeat on server_id %d: %w", id, err)
	}
	return nil
}

// run beats until stopped; a failed beat is retried at the next tick (the
// replicas see the row age, and the work pauses if it gets stale).
func (h *heartbeat) run(db *sql.DB, id int64) {
	defer h.wg.Done()
	t := time.NewTicker(beatEvery)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
		_ = beat(ctx, db, id)
		cancel()
	}
}

// close stops the beats and deletes this run's rows.
func (h *heartbeat) close() {
	if h == nil {
		return
	}
	close(h.stop)
	h.wg.Wait()
	for i, db := range h.dbs {
		ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
		_, _ = db.ExecContext(ctx, "DELETE FROM "+heartbeatTable+" WHERE server_id = ?", h.ids[i])
		cancel()
	}
}

var errNoBeat = errors.New("no heartbeat row yet")

// heartbeatLag is how far replica db trails the server whose server_id is
// source: the replica's clock minus the last beat it holds.
func heartbeatLag(ctx context.Context, db *sql.DB, source int64) (time.Duration, error) {
	var us sql.NullInt64
	err := db.QueryRowContext(ctx, "SELECT TIMESTAMPDIFF(MICROSECOND, ts, UTC_TIMESTAMP(6)) FROM "+heartbeatTable+" WHERE server_id = ?", source).Scan(&us)
	if errors.Is(err, sql.ErrNoRows) || dbutil.ErrNumber(err) == 1146 || dbutil.ErrNumber(err) == 1049 { // no row, no table, no schema
		return 0, fmt.Errorf("%w from server_id %d in %s", errNoBeat, source, heartbeatTable)
	}
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", heartbeatTable, err)
	}
	return max(time.Duration(us.Int64)*time.Microsecond, 0), nil
}
