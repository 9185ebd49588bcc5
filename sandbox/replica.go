package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/shardctl/shardctl/dbutil"
)

// upReplicas points each replica at its server (once; a restarted replica
// resumes by itself, START is repeated in case it was stopped), records how
// many replicas the sandbox has, and reports the servers' state.
func (c Config) upReplicas(ctx context.Context) ([]Server, error) {
	c.saveReplicas()
	for i := 1; i <= c.Servers; i++ {
		for k := 1; k <= c.Replicas; k++ {
			idx := c.ReplicaIndex(i, k)
			if err := c.Replicate(ctx, idx, Server{Port: c.port(i)}.Addr()); err != nil {
				return nil, fmt.Errorf("sandbox replica %d of server %d (port %d): %w", k, i, c.port(idx), err)
			}
		}
	}
	return Status(ctx, c)
}

// Replicate makes sandbox server i a GTID replica of source (which may be
// a server of another sandbox), replicating from the start of source's
// binlog, as the tool account; if it replicates already, it only makes sure
// replication runs.
func (c Config) Replicate(ctx context.Context, i int, source dbutil.Addr) error {
	db, err := c.rootDB(i)
	if err != nil {
		return err
	}
	defer db.Close()
	f, err := dbutil.DetectFlavor(ctx, db)
	if err != nil {
		return err
	}
	rows, err := db.QueryContext(ctx, f.ReplicaStatusSQL())
	if err != nil {
		return err
	}
	configured := rows.Next()
	rows.Close()
	// The sandbox's own constants and a loopback address: nothing a user typed.
	host, port := "'"+source.Host+"'", strconv.Itoa(source.Port)
	var stmts []string
	if f.MySQL {
		if !configured {
			stmts = append(stmts, "CHANGE REPLICATION SOURCE TO SOURCE_HOST = "+host+", SOURCE_PORT = "+port+
				", SOURCE_USER = '"+ToolUser+"', SOURCE_PASSWORD = '"+ToolPassword+"', SOURCE_AUTO_POSITION = 1, GET_SOURCE_PUBLIC_KEY = 1")
		}
		stmts = append(stmts, "START REPLICA")
	} else {
		if !configured {
			stmts = append(stmts, "CHANGE MASTER TO MASTER_HOST = "+host+", MASTER_PORT = "+port+
				", MASTER_USER = '"+ToolUser+"', MASTER_PASSWORD = '"+ToolPassword+"', MASTER_USE_GTID = slave_pos")
		}
		stmts = append(stmts, "START SLAVE")
	}
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return dbutil.Redact(fmt.Errorf("%s: %w", strings.SplitN(s, " TO ", 2)[0], err), ToolPassword)
		}
	}
	return nil
}

// SavedReplicas is the number of replicas per server Up last started in dir.
func SavedReplicas(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "replicas"))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

func (c Config) saveReplicas() {
	_ = os.WriteFile(filepath.Join(c.Dir, "replicas"), []byte(strconv.Itoa(c.Replicas)+"\n"), 0o644)
}
