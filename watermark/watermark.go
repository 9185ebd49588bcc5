// Package watermark holds the one progress mark that copy, prune and the plan
// share. It imports nothing from the database side, so a plan that stores
// marks can be read by a program that links no SQL driver.
package watermark

// Mark is how far a keyset walk over a table got: every row in scope with a
// primary key up to After has been handled (copied, or deleted by a prune).
// It is saved after each chunk commits and a resume starts after it.
type Mark struct {
	After []string `json:"after,omitempty"` // last handled PK tuple in text form (binary columns as 0x-hex); nil: start
	Done  bool     `json:"done"`
	Rows  int64    `json:"rows"` // rows handled by saved chunks (a chunk done just before a crash goes uncounted)
}

// Rows adds up the rows of a table's marks (what a copy or a cleanup has
// done so far).
func Rows[M ~map[string]Mark](marks M) int64 {
	var n int64
	for _, m := range marks {
		n += m.Rows
	}
	return n
}

// Range names a table's primary-key range (Lo, Hi] in text form; nil is
// open. Verify reports its chunks in it and the plan keeps the ones to
// re-check behind the fence in it.
type Range struct {
	Table string   `json:"table"`
	Lo    []string `json:"lo,omitempty"`
	Hi    []string `json:"hi,omitempty"`
}
