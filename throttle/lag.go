package throttle

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardctl/shardctl/dbutil"
)

// Lag sampling runs in the background, one goroutine per replica, so a slow
// or dead replica never holds a chunk longer than the wait between checks,
// and a chunk reads the last sample instead of a fresh round trip.
const (
	sampleEvery = 250 * time.Millisecond
	readTimeout = 2 * time.Second
	// staleAfter is how old the last sample may be before the signal counts
	// as lost (a read that hangs past its timeout, a sampler that stalled).
	staleAfter = 3 * time.Second
)

// ReplicaState is one reading of a replica's replication.
type ReplicaState struct {
	IORunning, SQLRunning bool
	Behind                sql.NullInt64 // seconds behind its source; NULL while the SQL thread is stopped
	LastError             string        // Last_IO_Error or Last_SQL_Error, when either is set
	SourceID              int64         // Source_Server_Id: the server_id it replicates from (0: not known yet)
	Source                string        // Source_Host:Source_Port, as the replica was pointed at it
}

// sample is the last reading of one replica (or why there is none).
type sample struct {
	at  time.Time
	st  ReplicaState
	lag time.Duration
	err error
}

// lagGauge samples one replica's lag in the background. A replica that
// cannot be read, does not replicate, or has not been read lately is over
// the limit: the work pauses (and says why) until it is back under it.
type lagGauge struct {
	db    *sql.DB
	name  string
	max   time.Duration
	beats bool // the heartbeat runs: lag is read from it, not from Seconds_Behind_Source
	onLag func(replica string, lag time.Duration, ok bool)

	mu      sync.Mutex
	last    sample
	started time.Time
	first   chan struct{} // closed once the first sample is in
	stop    chan struct{}
	done    chan struct{}
}

func newLagGauge(db *sql.DB, name string, max time.Duration, beats bool, onLag func(string, time.Duration, bool)) *lagGauge {
	g := &lagGauge{db: db, name: name, max: max, beats: beats, onLag: onLag, started: time.Now(), first: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go g.run()
	return g
}

func (g *lagGauge) run() {
	defer close(g.done)
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for n := 0; ; n++ {
		ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
		s := g.read(ctx)
		cancel()
		g.mu.Lock()
		g.last = s
		g.mu.Unlock()
		if n == 0 {
			close(g.first)
		}
		if g.onLag != nil {
			g.onLag(g.name, s.lag, s.err == nil && s.st.Behind.Valid)
		}
		select {
		case <-g.stop:
			return
		case <-t.C:
		}
	}
}

func (g *lagGauge) read(ctx context.Context) sample {
	s := sample{}
	s.st, s.err = ReadReplica(ctx, g.db)
	if s.err == nil && s.st.Behind.Valid {
		s.lag = time.Duration(s.st.Behind.Int64) * time.Second
		if g.beats {
			s.lag, s.err = heartbeatLag(ctx, g.db, s.st.SourceID)
		}
	}
	s.at = time.Now()
	return s
}

func (g *lagGauge) close() {
	close(g.stop)
	<-g.done
}

// Over never fails: an unreadable or stale signal is a reason to wait, not
// to stop the run; the work goes on once the replica answers again.
func (g *lagGauge) Over(ctx context.Context) (string, error) {
	select { // a run's first chunk waits for the first reading rather than reporting none
	case <-g.first:
	case <-ctx.Done():
		return "", ctx.Err()
	case <-time.After(readTimeout):
	}
	g.mu.Lock()
	s := g.last
	g.mu.Unlock()
	return s.reason(g.name, g.max, time.Now(), g.started), nil
}

// reason says why work must wait for this sample ("" when it need not).
func (s sample) reason(name string, max time.Duration, now, started time.Time) string {
	switch {
	case s.at.IsZero():
		return fmt.Sprintf("paused: no lag reading from replica %s yet (%s)", name, now.Sub(started).Round(100*time.Millisecond))
	case now.Sub(s.at) > staleAfter:
		return fmt.Sprintf("paused: the lag reading of replica %s is %s old", name, now.Sub(s.at).Round(100*time.Millisecond))
	case s.err != nil:
		return fmt.Sprintf("paused: cannot read the lag of replica %s: %v", name, s.err)
	case !s.st.IORunning || !s.st.SQLRunning || !s.st.Behind.Valid:
		r := fmt.Sprintf("paused: replica %s is not replicating (IO thread %s, SQL thread %s)", name, running(s.st.IORunning), running(s.st.SQLRunning))
		if s.st.LastError != "" {
			r += ": " + s.st.LastError
		}
		return r
	case s.lag > max:
		return fmt.Sprintf("throttled: replica %s lags %s > %s", name, s.lag.Round(time.Millisecond), max)
	}
	return ""
}

func running(b bool) string {
	if b {
		return "running"
	}
	return "stopped"
}

// ReadReplica reads a replica's replication state with the statement its
// flavor and version take, columns by name. A server that replicates from
// nobody is an error.
func ReadReplica(ctx context.Context, db *sql.DB) (ReplicaState, error) {
	st, ok, q, err := readReplica(ctx, db, false)
	if err == nil && !ok {
		err = fmt.Errorf("not a replica (%s is empty)", q)
	}
	return st, err
}

// SourceOf is the HOST:PORT a server replicates from ("": it replicates
// from nobody), read as ReadReplica reads it: a server configured as a
// replica counts even with its threads stopped, since starting them again
// is one statement away. Where the account may not read the replication
// status (MariaDB's BINLOG MONITOR without SLAVE MONITOR), the server's
// replication threads in the processlist (PROCESS) still tell a running
// replica, whose source is then "an unreadable source".
func SourceOf(ctx context.Context, db *sql.DB) (string, error) {
	st, ok, q, err := readReplica(ctx, db, true)
	switch {
	case err == nil && ok:
		return st.Source, nil
	case err == nil:
		return "", nil
	case !dbutil.IsPrivilegeErr(err):
		return "", err
	}
	var n int
	if perr := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND IN ('Slave_IO', 'Slave_SQL', 'Slave_worker')").Scan(&n); perr != nil {
		return "", err
	}
	if n > 0 {
		return fmt.Sprintf("a source this account may not read (%s: grant SLAVE MONITOR or REPLICATION CLIENT to see it)", q), nil
	}
	return "", nil
}

// readReplica reads the first row of the replication status (ok false: the
// server replicates from nobody) and says the statement it ran. skipGroup
// passes over MySQL Group Replication's own channels: a group's primary
// lists them, and is no replica of anything.
func readReplica(ctx context.Context, db *sql.DB, skipGroup bool) (ReplicaState, bool, string, error) {
	f, err := dbutil.FlavorOf(ctx, db)
	if err != nil {
		return ReplicaState{}, false, "", err
	}
	q := f.ReplicaStatusSQL()
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return ReplicaState{}, false, q, fmt.Errorf("%s: %w", q, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return ReplicaState{}, false, q, err
	}
	channel := dbutil.ReplicaColumn(cols, "Channel_Name")
	for rows.Next() {
		vals, ptrs := dbutil.Dest[sql.NullString](len(cols))
		if err := rows.Scan(ptrs...); err != nil {
			return ReplicaState{}, false, q, err
		}
		if skipGroup && channel >= 0 && strings.HasPrefix(vals[channel].String, "group_replication_") {
			continue
		}
		st, err := parseReplicaStatus(cols, vals)
		return st, err == nil, q, err
	}
	return ReplicaState{}, false, q, rows.Err()
}

// parseReplicaStatus reads one row of SHOW REPLICA|SLAVE STATUS.
func parseReplicaStatus(cols []string, vals []sql.NullString) (ReplicaState, error) {
	get := func(name string) (sql.NullString, error) {
		i := dbutil.ReplicaColumn(cols, name)
		if i < 0 {
			return sql.NullString{}, fmt.Errorf("replica status has no %s column", name)
		}
		return vals[i], nil
	}
	var st ReplicaState
	for _, c := range []struct {
		name string
		dst  *bool
	}{{"Replica_IO_Running", &st.IORunning}, {"Replica_SQL_Running", &st.SQLRunning}} {
		v, err := get(c.name)
		if err != nil {
			return st, err
		}
		*c.dst = v.String == "Yes"
	}
	behind, err := get("Seconds_Behind_Source")
	if err != nil {
		return st, err
	}
	if behind.Valid {
		n, err := strconv.ParseInt(behind.String, 10, 64)
		if err != nil {
			return st, fmt.Errorf("Seconds_Behind_Source %q: %w", behind.String, err)
		}
		st.Behind = sql.NullInt64{Int64: n, Valid: true}
	}
	if i := dbutil.ReplicaColumn(cols, "Source_Server_Id"); i >= 0 {
		st.SourceID, _ = strconv.ParseInt(vals[i].String, 10, 64)
	}
	if h, p := dbutil.ReplicaColumn(cols, "Source_Host"), dbutil.ReplicaColumn(cols, "Source_Port"); h >= 0 && p >= 0 {
		st.Source = net.JoinHostPort(vals[h].String, vals[p].String)
	}
	for _, name := range []string{"Last_IO_Error", "Last_SQL_Error"} {
		if i := dbutil.ReplicaColumn(cols, name); i >= 0 && vals[i].String != "" {
			st.LastError = vals[i].String
			break
		}
	}
	return st, nil
}
