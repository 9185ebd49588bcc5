package snapshot

import (
	"fmt"
	"sync"

	"github.com/shardctl/shardctl/watermark"
)

// tracker turns chunk commits, which arrive in any order, into the watermark
// of the longest committed prefix.
type tracker struct {
	mu       sync.Mutex
	wm       watermark.Mark   // progress: the committed prefix
	saved    watermark.Mark   // the last watermark save accepted
	parts    int              // key ranges, read at once; the prefix runs through them in order
	part     int              // the range the prefix is in
	next     int              // lowest sequence number of that range not yet committed
	ends     map[int]int      // range → how many chunks it had, once its reader is done
	pending  map[[2]int]batch // committed chunks after a gap (args dropped), by range and sequence
	save     func(watermark.Mark) error
	table    string
	progress func(string, int64)
}

func newTracker(from watermark.Mark, table string, save func(watermark.Mark) error, progress func(string, int64)) *tracker {
	return &tracker{wm: from, saved: from, parts: 1, ends: map[int]int{}, pending: map[[2]int]batch{}, save: save, table: table, progress: progress}
}

func (tr *tracker) committed(b batch) error {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.progress != nil {
		tr.progress(tr.table, int64(b.rows))
	}
	b.args = nil
	putBuf(b.data)
	b.data = nil
	tr.pending[[2]int{b.part, b.seq}] = b
	return tr.advance()
}

// ended records that range part had n chunks.
func (tr *tracker) ended(part, n int) error {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.ends[part] = n
	return tr.advance()
}

// advance extends the committed prefix as far as it goes and saves it.
func (tr *tracker) advance() error {
	advanced := false
	for {
		if p, ok := tr.pending[[2]int{tr.part, tr.next}]; ok {
			delete(tr.pending, [2]int{tr.part, tr.next})
			tr.next++
			tr.wm.After = p.last
			tr.wm.Rows += int64(p.rows)
			advanced = true
			continue
		}
		if n, ok := tr.ends[tr.part]; ok && n == tr.next && tr.part < tr.parts-1 {
			tr.part, tr.next = tr.part+1, 0
			continue
		}
		break
	}
	if advanced {
		return tr.store()
	}
	return nil
}

// store saves the progress; a failed save leaves the last saved watermark
// in place and the next one saves the whole prefix again.
func (tr *tracker) store() error {
	if tr.save != nil {
		if err := tr.save(tr.wm); err != nil {
			return fmt.Errorf("save watermark: %w", err)
		}
	}
	tr.saved = tr.wm
	return nil
}

func (tr *tracker) finish() error {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.wm.Done = true
	return tr.store()
}

// lastSaved is the watermark a resume would start from.
func (tr *tracker) lastSaved() watermark.Mark {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.saved
}
