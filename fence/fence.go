// Package fence blocks writes to the moving rows on the source during a
// cutover: BEFORE INSERT/UPDATE/DELETE triggers that fail with error 1290,
// the book's "moved, look the shard up again" signal.
package fence

// BypassVar is the session variable that lets shardctl's own sessions (the
// cleanup deletes) through a fence. Set it with "SET @shardctl_bypass_fence = 1".
const BypassVar = "@shardctl_bypass_fence"

// BypassSQL is the statement a pinned connection runs to pass the fence.
const BypassSQL = "SET " + BypassVar + " = 1"
