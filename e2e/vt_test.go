package e2e

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// vt is a small VT100 screen: enough of the escape codes the step view and
// slog use (cursor moves, erase in line and display, colours ignored), with
// wrapping, scrolling and UTF-8 split across reads. Lines scrolled off the
// top go to history.
type vt struct {
	w, h    int
	cells   [][]rune
	x, y    int
	wrap    bool // the cursor is past the last column: the next rune wraps
	pending []byte
	history []string
}

func newVT(w, h int) *vt {
	v := &vt{w: w, h: h}
	for range h {
		v.cells = append(v.cells, v.blank())
	}
	return v
}

func (v *vt) blank() []rune {
	r := make([]rune, v.w)
	for i := range r {
		r[i] = ' '
	}
	return r
}

func (v *vt) lineFeed() {
	if v.y < v.h-1 {
		v.y++
		return
	}
	v.history = append(v.history, strings.TrimRight(string(v.cells[0]), " "))
	v.cells = append(v.cells[1:], v.blank())
}

// Write feeds terminal output to the screen.
func (v *vt) Write(p []byte) (int, error) {
	b := append(v.pending, p...)
	v.pending = nil
	i := 0
	for i < len(b) {
		c := b[i]
		switch {
		case c == 0x1b:
			n, ok := v.escape(b[i:])
			if !ok {
				v.pending = append([]byte(nil), b[i:]...)
				return len(p), nil
			}
			i += n
			continue
		case c == '\r':
			v.x, v.wrap = 0, false
		case c == '\n':
			v.lineFeed()
			v.wrap = false
		case c == '\b':
			v.x, v.wrap = max(v.x-1, 0), false
		case c == '\t':
			v.x = min((v.x/8+1)*8, v.w-1)
		case c < 0x20 || c == 0x7f:
		default:
			if !utf8.FullRune(b[i:]) {
				v.pending = append([]byte(nil), b[i:]...)
				return len(p), nil
			}
			r, n := utf8.DecodeRune(b[i:])
			v.put(r)
			i += n
			continue
		}
		i++
	}
	return len(p), nil
}

func (v *vt) put(r rune) {
	if v.wrap {
		v.x, v.wrap = 0, false
		v.lineFeed()
	}
	v.cells[v.y][v.x] = r
	if v.x == v.w-1 {
		v.wrap = true
	} else {
		v.x++
	}
}

// escape handles one escape sequence at b[0]; ok is false when it is incomplete.
func (v *vt) escape(b []byte) (n int, ok bool) {
	if len(b) < 2 {
		return 0, false
	}
	if b[1] != '[' {
		return 2, true
	}
	j := 2
	for j < len(b) && (b[j] < 0x40 || b[j] > 0x7e) {
		j++
	}
	if j == len(b) {
		return 0, false
	}
	params := strings.TrimPrefix(string(b[2:j]), "?")
	var args []int
	for _, s := range strings.Split(params, ";") {
		n, _ := strconv.Atoi(s)
		args = append(args, n)
	}
	arg := func(i, def int) int {
		if i < len(args) && args[i] > 0 {
			return args[i]
		}
		return def
	}
	v.wrap = false
	switch b[j] {
	case 'A':
		v.y = max(v.y-arg(0, 1), 0)
	case 'B':
		v.y = min(v.y+arg(0, 1), v.h-1)
	case 'C':
		v.x = min(v.x+arg(0, 1), v.w-1)
	case 'D':
		v.x = max(v.x-arg(0, 1), 0)
	case 'G':
		v.x = min(arg(0, 1)-1, v.w-1)
	case 'H', 'f':
		v.y, v.x = min(arg(0, 1)-1, v.h-1), min(arg(1, 1)-1, v.w-1)
	case 'K':
		from, to := v.x, v.w
		switch arg(0, 0) {
		case 1:
			from, to = 0, v.x+1
		case 2:
			from = 0
		}
		for k := from; k < to; k++ {
			v.cells[v.y][k] = ' '
		}
	case 'J':
		switch arg(0, 0) {
		case 0:
			for k := v.x; k < v.w; k++ {
				v.cells[v.y][k] = ' '
			}
			for y := v.y + 1; y < v.h; y++ {
				v.cells[y] = v.blank()
			}
		case 1:
			for y := 0; y < v.y; y++ {
				v.cells[y] = v.blank()
			}
		default:
			for y := range v.h {
				v.cells[y] = v.blank()
			}
		}
	}
	return j + 1, true
}

// lines is the screen, trailing blanks cut.
func (v *vt) lines() []string {
	var out []string
	for _, l := range v.cells {
		out = append(out, strings.TrimRight(string(l), " "))
	}
	return out
}

func (v *vt) String() string { return strings.Join(v.lines(), "\n") }

func TestVT(t *testing.T) {
	v := newVT(10, 3)
	v.Write([]byte("hello\r\nworld")) // a pty turns \n into \r\n
	v.Write([]byte("\x1b[1A\rHE\x1b[K\r\n"))
	if got := v.lines(); got[0] != "HE" || got[1] != "world" {
		t.Fatalf("cursor up and erase: %q", got)
	}
	v.Write([]byte("\r\n0123456789ab"))
	if got := v.lines(); got[1] != "0123456789" || got[2] != "ab" || len(v.history) != 1 || v.history[0] != "HE" {
		t.Fatalf("wrap and scroll: %q history %q", got, v.history)
	}
	s := []byte("\x1b[2J\x1b[1;1H✓ ok\x1b[32m!\x1b[0m")
	for _, c := range s { // one byte at a time: sequences and UTF-8 split across reads
		v.Write([]byte{c})
	}
	if got := v.lines(); got[0] != "✓ ok!" || got[1] != "" {
		t.Fatalf("split writes: %q", got)
	}
	v.Write([]byte("\r\x1b[J"))
	if got := v.lines(); got[0] != "" {
		t.Fatalf("erase below: %q", got)
	}
}
