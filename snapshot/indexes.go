package snapshot

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/shardctl/shardctl/chunk"
	"github.com/shardctl/shardctl/dbutil"
)

// Plain secondary indexes are built after a table's rows are in, in one
// ALTER: a sorted build costs the target far less than keeping each index up
// to date row by row (measured: about 40% of the target's CPU for a sysbench
// table). Nothing records which indexes are pending: they are the deferrable
// KEYs of the source's definition that the target lacks, so a resume after a
// crash at any point builds exactly the missing ones before the table is
// marked done.

// splitDDL cuts SHOW CREATE TABLE's text into its first line, its element
// lines (without trailing commas) and the rest. ok is false when the text is
// not laid out as expected, and nothing is deferred then.
func splitDDL(ddl string) (head string, elems []string, tail string, ok bool) {
	lines := strings.Split(ddl, "\n")
	if len(lines) < 3 || !strings.HasSuffix(lines[0], " (") {
		return "", nil, "", false
	}
	for i := 1; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], ")") {
			return lines[0], elems, strings.Join(lines[i:], "\n"), len(elems) > 0
		}
		if !strings.HasPrefix(lines[i], "  ") {
			return "", nil, "", false
		}
		elems = append(elems, strings.TrimSuffix(lines[i], ","))
	}
	return "", nil, "", false
}

// deferrable returns the plain KEY elements of ddl that can be built after
// the copy, and ddl without them. A table with foreign keys (or referenced by
// one: referenced), FULLTEXT or SPATIAL indexes keeps all its indexes; so
// does a KEY led by the AUTO_INCREMENT column, which the column needs.
func deferrable(ddl string, referenced bool) (keys []string, rest string) {
	head, elems, tail, ok := splitDDL(ddl)
	if !ok || referenced {
		return nil, ddl
	}
	auto := ""
	for _, e := range elems {
		s := strings.TrimSpace(e)
		switch {
		case strings.Contains(s, "FOREIGN KEY"), strings.HasPrefix(s, "FULLTEXT "), strings.HasPrefix(s, "SPATIAL "):
			return nil, ddl
		case strings.HasPrefix(s, "`") && strings.Contains(s, " AUTO_INCREMENT"):
			auto = s[:strings.Index(s[1:], "`")+2]
		}
	}
	var kept []string
	for _, e := range elems {
		s := strings.TrimSpace(e)
		if strings.HasPrefix(s, "KEY `") && (auto == "" || !strings.Contains(s, "("+auto)) {
			keys = append(keys, s)
			continue
		}
		kept = append(kept, e)
	}
	if len(keys) == 0 {
		return nil, ddl
	}
	return keys, head + "\n" + strings.Join(kept, ",\n") + "\n" + tail
}

// keyName is the quoted name of a KEY element ("KEY `k` (…)").
func keyName(elem string) string {
	s := strings.TrimPrefix(elem, "KEY ")
	if end := strings.Index(s[1:], "`"); end >= 0 {
		return s[:end+2]
	}
	return s
}

// referencedTables names the tables of schema that a foreign key points at.
func referencedTables(ctx context.Context, q dbutil.Querier, schema string) (map[string]bool, error) {
	out := map[string]bool{}
	var n string
	err := dbutil.ScanEach(ctx, q, `SELECT DISTINCT REFERENCED_TABLE_NAME FROM information_schema.REFERENTIAL_CONSTRAINTS
		WHERE UNIQUE_CONSTRAINT_SCHEMA = ?`, []any{schema}, []any{&n}, func() error { out[n] = true; return nil })
	return out, err
}

// ddlBuffer is the sort buffer a MySQL index build gets (its session's
// innodb_ddl_buffer_size, unless the server's is larger). The default, 1 MiB
// shared by the build's threads, sorts a 1M-row table's keys in many runs
// merged through temporary files; in 64 MiB they sort in memory. Measured on
// MySQL 9.7, the k_1 build of 1M sysbench rows: 7.1-8.2 s against 4.6-7.1 s,
// alternated (docs/BENCHMARKS-history.md). MariaDB's innodb_sort_buffer_size
// is read-only, and MySQL before 8.0.27 has no such variable: the setting is
// skipped where the server refuses it.
const ddlBuffer = 64 << 20

// indexSession is a target session for building indexes.
func indexSession(ctx context.Context, db *sql.DB) (*sql.Conn, error) {
	conn, err := chunk.Session(ctx, db)
	if err != nil {
		return nil, err
	}
	var have int64
	err = conn.QueryRowContext(ctx, "SELECT @@SESSION.innodb_ddl_buffer_size").Scan(&have)
	if err == nil && have < ddlBuffer {
		_, err = conn.ExecContext(ctx, "SET SESSION innodb_ddl_buffer_size = ?", ddlBuffer)
	}
	if err != nil && dbutil.ErrNumber(err) == 0 { // not the server refusing it: the session is broken
		chunk.Release(conn)
		return nil, err
	}
	return conn, nil
}

// buildIndexes adds, in one ALTER, the deferrable indexes of the source's
// table that the target's lacks.
func (c *Copier) buildIndexes(ctx context.Context, table string) error {
	var name, src, dst string
	if err := c.Source.QueryRowContext(ctx, "SHOW CREATE TABLE "+dbutil.Table(c.SourceSchema, table)).Scan(&name, &src); err != nil {
		return fmt.Errorf("show create table on the source: %w", err)
	}
	ref, err := referencedTables(ctx, c.Source, c.SourceSchema)
	if err != nil {
		return fmt.Errorf("read foreign keys: %w", err)
	}
	keys, _ := deferrable(src, ref[table])
	if len(keys) == 0 {
		return nil
	}
	if err := c.Target.QueryRowContext(ctx, "SHOW CREATE TABLE "+dbutil.Table(c.TargetSchema, table)).Scan(&name, &dst); err != nil {
		return fmt.Errorf("show create table on the target: %w", err)
	}
	_, elems, _, _ := splitDDL(dst)
	have := map[string]bool{}
	for _, e := range elems {
		s := strings.TrimSpace(e)
		if strings.HasPrefix(s, "KEY `") {
			have[keyName(s)] = true
		}
	}
	var add []string
	for _, k := range keys {
		if !have[keyName(k)] {
			add = append(add, "ADD "+k)
		}
	}
	if len(add) == 0 {
		return nil
	}
	conn, err := indexSession(ctx, c.Target)
	if err != nil {
		return fmt.Errorf("open a target session: %w", err)
	}
	defer chunk.Release(conn)
	_, err = conn.ExecContext(ctx, "ALTER TABLE "+dbutil.Table(c.TargetSchema, table)+" "+strings.Join(add, ", "))
	if dbutil.ErrNumber(err) == 1061 { // duplicate key name: another copy into this table (a merge) built them first
		return nil
	}
	if err != nil {
		return fmt.Errorf("build %d secondary indexes: %w", len(add), err)
	}
	return nil
}
