package plans

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// Durations stay plain millisecond numbers in plan files.
func TestMillisJSON(t *testing.T) {
	o := Options{MaxBlackoutMS: MillisOf(1500 * time.Millisecond), BackoffMS: 250}
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"max_blackout_ms":1500`) || !strings.Contains(string(b), `"backoff_ms":250`) {
		t.Fatalf("json %s", b)
	}
	var back Options
	if err := json.Unmarshal([]byte(`{"max_blackout_ms":2000,"lock_wait_ms":1000}`), &back); err != nil {
		t.Fatal(err)
	}
	if back.MaxBlackoutMS.D() != 2*time.Second || back.LockWaitMS.D() != time.Second {
		t.Fatalf("decoded %v %v", back.MaxBlackoutMS.D(), back.LockWaitMS.D())
	}
}
