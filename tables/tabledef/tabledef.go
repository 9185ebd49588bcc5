// Package tabledef holds the description of a table that plans carry
// (columns, primary key, the filter of the rows an operation moves). It needs
// no database; package tables re-exports it and reads it from a server.
package tabledef

import "github.com/shardctl/shardctl/keyspace"

// Table is one table of a shard schema.
type Table struct {
	Name        string          `json:"name"`
	Columns     []string        `json:"columns"`
	PK          []string        `json:"primary_key"`            // the columns that identify a row: the primary key's, or Key's
	Key         string          `json:"key,omitempty"`          // the UNIQUE key PK comes from when the table has no primary key
	Filter      keyspace.Filter `json:"filter"`                 // rows the operation moves (all rows when Filter.Column is empty)
	Sharded     bool            `json:"sharded"`                // listed in the shard map's columns table
	ShardColumn string          `json:"shard_column,omitempty"` // its sharding column
	EstRows     int64           `json:"est_rows"`               // information_schema estimate, for plans and progress
	EstBytes    int64           `json:"est_bytes,omitempty"`    // data + index length
}

// Index is the name of the index PK comes from: PRIMARY or Key.
func (t Table) Index() string {
	if t.Key != "" {
		return t.Key
	}
	return "PRIMARY"
}

// Find returns the table named name.
func Find(ts []Table, name string) (Table, bool) {
	for _, t := range ts {
		if t.Name == name {
			return t, true
		}
	}
	return Table{}, false
}
