// Package schemaobj carries a shard schema's views, triggers, stored
// functions and procedures, and events to the target of an operation.
package schemaobj

// SkipVar is the session variable shardctl's own sessions (copy, binlog
// apply, cleanup, abort) set so that guarded triggers do not fire on the rows
// they write: the source's binlog already carries whatever the application's
// triggers wrote.
const SkipVar = "@shardctl_skip_triggers"

// SkipSQL is the statement a session runs to pass guarded triggers.
const SkipSQL = "SET " + SkipVar + " = 1"
