// Command shardctl rebalances a sharded MySQL/MariaDB fleet online: move a
// shard to another server, split a range shard, merge neighbours, all driven
// by a shard map kept in a "sharding database".
package main

import "github.com/shardctl/shardctl/cmd"

func main() { cmd.Main() }
