package binlog

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/shardctl/shardctl/dbutil"
)

// GTIDContains reports whether the GTID set have contains every GTID of want.
//
// MySQL: set containment by source UUID and interval (GTID_SUBSET).
// MariaDB: a GTID is domain-server-seq, and a higher sequence number of
// another server in the same domain says nothing about this server's
// transactions (a non-replica that wrote 0-3-482 has not seen 0-2-141), so
// each of want's triples needs a triple of the same domain and server with
// at least its sequence number in have. have is best a gtid_binlog_state,
// which keeps the last GTID of every domain and server pair.
func GTIDContains(flavor, have, want string) (bool, error) {
	if flavor == mysql.MariaDBFlavor {
		h, err := mariadbTriples(have)
		if err != nil {
			return false, err
		}
		w, err := mariadbTriples(want)
		if err != nil {
			return false, err
		}
		for k, seq := range w {
			if got, ok := h[k]; !ok || got < seq {
				return false, nil
			}
		}
		return true, nil
	}
	h, err := mysql.ParseGTIDSet(flavor, have)
	if err != nil {
		return false, fmt.Errorf("GTID set %q: %w", have, err)
	}
	w, err := mysql.ParseGTIDSet(flavor, want)
	if err != nil {
		return false, fmt.Errorf("GTID set %q: %w", want, err)
	}
	return h.Contain(w), nil
}

// GTIDFlavor names the flavor whose form a GTID set has: MySQL's
// UUID:intervals or MariaDB's DOMAIN-SERVER-SEQUENCE list.
func GTIDFlavor(set string) string {
	if strings.Contains(set, ":") {
		return mysql.MySQLFlavor
	}
	return mysql.MariaDBFlavor
}

// domainServer is the part of a MariaDB GTID that names whose transaction it is.
type domainServer struct{ domain, server uint64 }

// mariadbTriples parses a MariaDB GTID list ("0-2-141,1-3-7") into the
// highest sequence number per domain and server.
func mariadbTriples(set string) (map[domainServer]uint64, error) {
	out := map[domainServer]uint64{}
	for _, g := range strings.Split(set, ",") {
		g = strings.TrimSpace(g)
		if g == "" {
			continue
		}
		parts := strings.Split(g, "-")
		if len(parts) != 3 {
			return nil, fmt.Errorf("GTID %q in %q: want DOMAIN-SERVER-SEQUENCE", g, set)
		}
		var n [3]uint64
		for i, s := range parts {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("GTID %q in %q: %w", g, set, err)
			}
			n[i] = v
		}
		k := domainServer{n[0], n[1]}
		out[k] = max(out[k], n[2])
	}
	return out, nil
}

// HeldGTIDs reads every GTID the server has in its binary log, in the form
// GTIDContains compares: MySQL's gtid_executed, MariaDB's gtid_binlog_state
// (the last GTID of each domain and server; gtid_binlog_pos keeps only the
// last of each domain, whoever wrote it, and gtid_slave_pos is not what a
// binlog tail can start from).
func HeldGTIDs(ctx context.Context, db *sql.DB) (flavor, have string, err error) {
	f, err := dbutil.FlavorOf(ctx, db)
	if err != nil {
		return "", "", err
	}
	q := "SELECT @@global.gtid_binlog_state"
	if f.MySQL {
		q = "SELECT @@global.gtid_executed"
	}
	if err := db.QueryRowContext(ctx, q).Scan(&have); err != nil {
		return f.Name(), "", fmt.Errorf("read the GTID set (%s): %w", q, err)
	}
	return f.Name(), strings.ReplaceAll(have, "\n", ""), nil
}
