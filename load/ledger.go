package load

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Ledger operations.
const (
	OpPut = "put" // the key holds Val (insert or update)
	OpDel = "del" // the key is absent
)

// Entry is one ledger line: an acknowledged write, or with Ambiguous a write
// whose outcome is unknown (the connection was lost during the statement).
type Entry struct {
	Seq       int64  `json:"seq"`
	Key       int64  `json:"key"`
	Op        string `json:"op"`
	Val       string `json:"val,omitempty"`
	T         int64  `json:"t"` // unix nanoseconds of the acknowledgement
	Ambiguous bool   `json:"ambiguous,omitempty"`
}

// ledger appends entries through a buffer; Run flushes it every 100 ms.
// A nil *ledger keeps nothing.
type ledger struct {
	mu  sync.Mutex
	f   *os.File
	w   *bufio.Writer
	err error
}

func createLedger(path string) (*ledger, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("load: create ledger: %w", err)
	}
	return &ledger{f: f, w: bufio.NewWriterSize(f, 64<<10)}, nil
}

func (l *ledger) append(e Entry) error {
	if l == nil {
		return nil
	}
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("load: ledger: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		if _, err := l.w.Write(append(b, '\n')); err != nil {
			l.err = fmt.Errorf("load: write ledger %s: %w", l.f.Name(), err)
		}
	}
	return l.err
}

func (l *ledger) flush() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		if err := l.w.Flush(); err != nil {
			l.err = fmt.Errorf("load: write ledger %s: %w", l.f.Name(), err)
		}
	}
	return l.err
}

func (l *ledger) close() error {
	if l == nil {
		return nil
	}
	err := l.flush()
	if err == nil {
		if serr := l.f.Sync(); serr != nil {
			err = fmt.Errorf("load: sync ledger %s: %w", l.f.Name(), serr)
		}
	}
	if cerr := l.f.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("load: close ledger %s: %w", l.f.Name(), cerr)
	}
	return err
}

// ErrTruncated marks a ledger whose last line was cut off mid-write; the
// entries before it are returned with it.
var ErrTruncated = errors.New("ledger's last line is incomplete")

// ReadLedger reads a ledger file. A cut-off last line (a writer killed
// mid-line) is dropped and reported with ErrTruncated alongside the entries;
// any other malformed line is an error.
func ReadLedger(path string) ([]Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	defer f.Close()
	return parseLedger(f, path)
}

func parseLedger(rd io.Reader, name string) ([]Entry, error) {
	br := bufio.NewReader(rd)
	var out []Entry
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return out, fmt.Errorf("read ledger %s: %w", name, err)
		}
		last := errors.Is(err, io.EOF)
		if t := bytes.TrimSpace(b); len(t) > 0 {
			var e Entry
			perr := json.Unmarshal(t, &e)
			if perr == nil && e.Op != OpPut && e.Op != OpDel {
				perr = fmt.Errorf("unknown op %q", e.Op)
			}
			switch {
			case perr != nil && last:
				return out, fmt.Errorf("ledger %s line %d: %w", name, line, ErrTruncated)
			case perr != nil:
				return nil, fmt.Errorf("ledger %s line %d is not a ledger entry: %w", name, line, perr)
			}
			out = append(out, e)
		}
		if last {
			return out, nil
		}
	}
}

// Outcome is one state a key may be in at the end.
type Outcome struct {
	Present bool
	Val     string // last_name when Present
}

func (o Outcome) String() string {
	if !o.Present {
		return "absent"
	}
	return strconv.Quote(o.Val)
}

// Expectation is what the ledger allows a key to hold at the end: one of
// Allowed, or anything at all when Unknown (every write to it so far was
// ambiguous, so its state before the load still counts and is not known).
type Expectation struct {
	Allowed []Outcome
	Unknown bool
}

// Allows reports whether the key may be in state o.
func (x Expectation) Allows(o Outcome) bool {
	return x.Unknown || contains(x.Allowed, o)
}

// MayBeAbsent reports whether the key may be absent.
func (x Expectation) MayBeAbsent() bool { return x.Allows(Outcome{}) }

func (x Expectation) String() string {
	var parts []string
	for _, a := range x.Allowed {
		parts = append(parts, a.String())
	}
	if x.Unknown {
		parts = append(parts, "its state before the load")
	}
	return strings.Join(parts, " or ")
}

// Fold reduces entries to each key's allowed final states. Entries are taken
// in sequence order (a key's writes are sequential, so that is their order).
func Fold(entries []Entry) map[int64]Expectation {
	es := append([]Entry(nil), entries...)
	sort.SliceStable(es, func(i, j int) bool { return es[i].Seq < es[j].Seq })
	out := map[int64]Expectation{}
	for _, e := range es {
		o := Outcome{Present: e.Op == OpPut, Val: e.Val}
		if !o.Present {
			o.Val = ""
		}
		x, seen := out[e.Key]
		switch {
		case !e.Ambiguous:
			x = Expectation{Allowed: []Outcome{o}}
		case !seen:
			x = Expectation{Allowed: []Outcome{o}, Unknown: true}
		case !contains(x.Allowed, o):
			x.Allowed = append(append([]Outcome(nil), x.Allowed...), o)
		}
		out[e.Key] = x
	}
	return out
}

func contains(list []Outcome, o Outcome) bool {
	for _, a := range list {
		if a == o {
			return true
		}
	}
	return false
}
