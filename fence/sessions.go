package fence

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/fault"
)

// Sessions are fence sessions opened and set up before a blackout starts, so
// connecting (a handshake and three round trips per table, slow on a loaded
// server) is not part of it.
type Sessions struct {
	db    *sql.DB
	f     dbutil.Flavor
	conns []*sql.Conn
	ids   []int64 // CONNECTION_ID() of each, read when first needed (MySQL's KILL QUERY bound)
}

// OpenSessions opens n fence sessions on db, all at once.
func OpenSessions(ctx context.Context, db *sql.DB, n int, lockWait time.Duration) (*Sessions, error) {
	f, err := dbutil.FlavorOf(ctx, db)
	if err != nil {
		return nil, err
	}
	s := &Sessions{db: db, f: f, conns: make([]*sql.Conn, n), ids: make([]int64, n)}
	errs := make(chan error, n)
	for i := range n {
		go func() {
			conn, err := db.Conn(ctx)
			if err == nil {
				if err = setup(ctx, conn, f, lockWait); err != nil {
					release(conn)
				} else {
					s.conns[i] = conn
				}
			}
			errs <- err
		}()
	}
	var all error
	for range n {
		all = errors.Join(all, <-errs)
	}
	if all != nil {
		s.Close()
		return nil, all
	}
	return s, nil
}

// Install fences ts (one session per table, len(ts) must not exceed the
// sessions opened) within lockWait, like the package's Install.
func (s *Sessions) Install(ctx context.Context, schema string, ts []Table, lockWait time.Duration) error {
	if len(ts) > len(s.conns) {
		return errors.New("fence: fewer sessions than tables")
	}
	deadline := time.Now().Add(lockWait)
	errs := make(chan error, len(ts))
	for i := range ts {
		go func() { errs <- installOne(ctx, s.f, s.conns[i], schema, ts[i], deadline) }()
	}
	var first error
	for range ts {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first == nil {
		fault.Hit("fence:installed") // tests: crash or hold with the fence in place
	}
	return first
}

// Close closes the sessions.
func (s *Sessions) Close() {
	for i, c := range s.conns {
		if c != nil {
			release(c)
			s.conns[i] = nil
		}
	}
}
