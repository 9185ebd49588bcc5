package window

// The window's requests: 'plan revert' and 'plan complete' from another
// process leave a request file beside the plan, which the process running
// the window takes, carries out and answers in the plan.

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/shardctl/shardctl/lock"
	"github.com/shardctl/shardctl/plans"
)

// Request is a 'plan revert' or 'plan complete' waiting for the process running the window.
type Request struct {
	ID     string `json:"id"`
	Action string `json:"action"`
}

// RequestPath is where requests to the process running plan file path wait.
func RequestPath(planPath string) string { return planPath + ".request" }

// Post leaves a request for action beside plan file path (of plan planID).
// A request already waiting makes it busy (lock.ErrBusy, exit 4), not
// resumable: the other request is being carried out.
func Post(path, planID, action string) (Request, error) {
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	q := Request{ID: hex.EncodeToString(nonce[:]), Action: action}
	b, _ := json.Marshal(q)
	tmp := fmt.Sprintf("%s.%s.tmp", RequestPath(path), q.ID)
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return q, fmt.Errorf("write request: %w", err)
	}
	err := os.Link(tmp, RequestPath(path))
	os.Remove(tmp)
	if errors.Is(err, os.ErrExist) {
		return q, fmt.Errorf("%w: another request is waiting for plan %s (%s); wait for it, or remove that file if no process runs the plan", lock.ErrBusy, planID, RequestPath(path))
	} else if err != nil {
		return q, fmt.Errorf("write request: %w", err)
	}
	return q, nil
}

// Take claims a pending request (renaming it first, so a requester that
// gives up can tell whether it was taken).
func Take(planPath string) (*Request, error) {
	if planPath == "" {
		return nil, nil
	}
	taken := RequestPath(planPath) + ".taken"
	if err := os.Rename(RequestPath(planPath), taken); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	defer os.Remove(taken)
	b, err := os.ReadFile(taken)
	if err != nil {
		return nil, err
	}
	var q Request
	if err := json.Unmarshal(b, &q); err != nil {
		return nil, fmt.Errorf("request file %s: %w", taken, err)
	}
	return &q, nil
}

// Record answers request q in the window (err is why it was not carried
// out), keeping the last ten answers.
func Record(w *plans.Window, q *Request, err error) {
	rec := plans.Request{ID: q.ID, Action: q.Action, At: time.Now().UTC()}
	if err != nil {
		rec.Error = err.Error()
	}
	w.Requests = append(w.Requests, rec)
	if n := len(w.Requests); n > 10 {
		w.Requests = w.Requests[n-10:]
	}
}

// Find is the answer to request id, if the window has one.
func Find(p *plans.Plan, id string) *plans.Request {
	if p.Window == nil {
		return nil
	}
	for i := range p.Window.Requests {
		if p.Window.Requests[i].ID == id {
			return &p.Window.Requests[i]
		}
	}
	return nil
}
