// Package schemaobj carries a shard schema's views, triggers, stored
// functions and procedures, and events to the target of an operation.
package schemaobj

import "github.com/shardctl/shardctl/schemaobj/objdef"

// SkipVar is the session variable that passes guarded triggers (see objdef.SkipVar).
const SkipVar = objdef.SkipVar

// SkipSQL is the statement a session runs to pass guarded triggers.
const SkipSQL = "SET " + SkipVar + " = 1"
