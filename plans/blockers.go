package plans

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Blocker is a session that held a lock on a fenced table while a cutover
// attempt waited for it: what the server said about it, and where from.
type Blocker struct {
	ID        int64  `json:"id"`                  // connection (processlist) id
	User      string `json:"user"`                // user@host
	AgeMS     int64  `json:"age_ms"`              // of its transaction, else of its statement
	Statement string `json:"statement,omitempty"` // what it runs now (empty: idle in its transaction)
	Table     string `json:"table,omitempty"`     // the fenced table it holds, where the server says
	Lock      string `json:"lock,omitempty"`      // the lock's type, where the server says
	// Source: metadata_locks (performance_schema), metadata_lock_info
	// (MariaDB's plugin), or innodb_trx: an open transaction, where the
	// server cannot say which tables it holds.
	Source string `json:"source"`
	Killed bool   `json:"killed,omitempty"`       // --kill-blockers ended the session
	Note   string `json:"kill_refused,omitempty"` // why a kill failed
}

// String renders the blocker on one line.
func (b Blocker) String() string {
	var s strings.Builder
	fmt.Fprintf(&s, "session %d (%s), open %s", b.ID, b.User, (time.Duration(b.AgeMS) * time.Millisecond).String())
	if b.Table != "" {
		fmt.Fprintf(&s, ", holds %s", b.Table)
		if b.Lock != "" {
			fmt.Fprintf(&s, " (%s)", b.Lock)
		}
	}
	st := b.Statement
	if st == "" {
		st = "idle in transaction"
	} else if len(st) > 120 {
		st = st[:120] + "…"
	}
	fmt.Fprintf(&s, ": %s [%s]", st, b.Source)
	if b.Killed {
		s.WriteString(" KILLED")
	}
	if b.Note != "" {
		s.WriteString(" (kill refused: " + b.Note + ")")
	}
	return s.String()
}

// printBlockers lists an attempt's blockers under it.
func printBlockers(w io.Writer, a Attempt) {
	for _, b := range a.Blockers {
		fmt.Fprintf(w, "       blocker: %s\n", b)
	}
}
