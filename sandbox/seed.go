package sandbox

import (
	"context"
	"database/sql"
	"fmt"
	"math/big"
	"math/rand"
	"strings"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/shardmap"
)

// The book's employees schema: every table but departments is sharded on
// emp_no; departments is global (a copy in every shard). No foreign keys, so
// a shard's tables can be copied in any order.
var EmployeesDDL = []string{
	"CREATE TABLE IF NOT EXISTS departments (dept_no CHAR(4) NOT NULL PRIMARY KEY, dept_name VARCHAR(40) NOT NULL, UNIQUE KEY dept_name (dept_name)) ENGINE=InnoDB",
	"CREATE TABLE IF NOT EXISTS employees (emp_no INT NOT NULL PRIMARY KEY, birth_date DATE NOT NULL, first_name VARCHAR(14) NOT NULL, last_name VARCHAR(16) NOT NULL, gender ENUM('M','F') NOT NULL, hire_date DATE NOT NULL) ENGINE=InnoDB",
	"CREATE TABLE IF NOT EXISTS salaries (emp_no INT NOT NULL, salary INT NOT NULL, from_date DATE NOT NULL, to_date DATE NOT NULL, PRIMARY KEY (emp_no, from_date)) ENGINE=InnoDB",
	"CREATE TABLE IF NOT EXISTS titles (emp_no INT NOT NULL, title VARCHAR(50) NOT NULL, from_date DATE NOT NULL, to_date DATE NULL, PRIMARY KEY (emp_no, title, from_date)) ENGINE=InnoDB",
	"CREATE TABLE IF NOT EXISTS dept_emp (emp_no INT NOT NULL, dept_no CHAR(4) NOT NULL, from_date DATE NOT NULL, to_date DATE NOT NULL, PRIMARY KEY (emp_no, dept_no), KEY dept_no (dept_no)) ENGINE=InnoDB",
	"CREATE TABLE IF NOT EXISTS dept_manager (emp_no INT NOT NULL, dept_no CHAR(4) NOT NULL, from_date DATE NOT NULL, to_date DATE NOT NULL, PRIMARY KEY (emp_no, dept_no), KEY dept_no (dept_no)) ENGINE=InnoDB",
}

// ShardedTables are the employees tables sharded on emp_no.
var ShardedTables = []string{"employees", "salaries", "titles", "dept_emp", "dept_manager"}

var departments = [][2]string{{"d001", "Marketing"}, {"d002", "Finance"}, {"d003", "Human Resources"}, {"d004", "Production"},
	{"d005", "Development"}, {"d006", "Quality Management"}, {"d007", "Sales"}, {"d008", "Research"}, {"d009", "Customer Service"}}

// SeedConfig describes the data set.
type SeedConfig struct {
	Servers      []dbutil.Addr // shards go round-robin over these
	Creds        dbutil.Creds
	Shards       int   // K range shards
	Employees    int   // employees per shard (about 9 rows each over the five sharded tables)
	Sizes        []int // optional per-shard employee counts; Sizes[k-1] overrides Employees for shard k
	RangeWidth   int64 // each shard owns [ (k-1)*RangeWidth, k*RangeWidth ); the last is open-ended
	SchemaPrefix string
	Function     string
	// Hash seeds a HASH function instead: K evenly spaced ring points, and
	// employees 1..K*Employees, each in the shard that owns MD5(emp_no).
	Hash bool
	// List seeds a LIST function instead: each employee is a tenant, one
	// list point per emp_no, the keys laid out as for RANGE (and as many
	// points again above them, tenants without rows yet).
	List     bool
	Progress func(shard int, rows int64)
}

func (c *SeedConfig) defaults() {
	if c.RangeWidth <= 0 {
		c.RangeWidth = 1_000_000
	}
	if c.SchemaPrefix == "" {
		c.SchemaPrefix = "shard_"
	}
	if c.Function == "" {
		c.Function = "employees"
	}
}

// SeededShard is one shard the seed made.
type SeededShard struct {
	ShardID int    `json:"shard_id"`
	Server  string `json:"server"`
	Schema  string `json:"schema"`
	Lower   int64  `json:"lower_bound"`
	Point   string `json:"hash_point,omitempty"`
	Rows    int64  `json:"rows"`
}

// Seed creates the employees data set over K range shards and registers them
// in the shard map. It is idempotent: a shard whose employees table already
// has rows is left as it is, and shard map entries are only added once.
// Long on purpose: one idempotent sequence (function, tables, shards, mappings).
func Seed(ctx context.Context, store *shardmap.Store, c SeedConfig) ([]SeededShard, error) {
	c.defaults()
	if c.Shards < 1 || len(c.Servers) == 0 || c.Employees < 0 {
		return nil, fmt.Errorf("seed: need at least one server, one shard and a non-negative employee count")
	}
	if err := store.Init(ctx); err != nil {
		return nil, err
	}
	if store.Rows == nil {
		store.Rows = shardmap.ShardRows(c.Creds) // each new range or point is checked for stranded rows
	}
	typ := shardmap.Range
	switch {
	case c.Hash && c.List:
		return nil, fmt.Errorf("seed: a function is HASH or LIST, not both")
	case c.Hash:
		typ = shardmap.Hash
	case c.List:
		typ = shardmap.List
	}
	if _, err := store.AddFunction(ctx, c.Function, typ, keyspace.IntKey); err != nil {
		return nil, err
	}
	for _, t := range ShardedTables {
		if err := store.AddColumn(ctx, t, "emp_no", c.Function); err != nil {
			return nil, err
		}
	}
	pools := map[string]*sql.DB{}
	defer func() {
		for _, db := range pools {
			db.Close()
		}
	}()
	points := make([]string, c.Shards)
	for k := range points {
		points[k] = RingPoint(k, c.Shards)
	}
	m, err := store.Load(ctx)
	if err != nil {
		return nil, err
	}
	f, _ := m.Function(c.Function)
	var out []SeededShard
	for k := 1; k <= c.Shards; k++ {
		// A shard already in the shard map is left where it lives now (it may
		// have been moved, split or merged since it was seeded).
		if sh, ok, err := existing(ctx, m, f, c, k, points, pools); err != nil {
			return nil, err
		} else if ok {
			out = append(out, sh)
			continue
		}
		addr := c.Servers[(k-1)%len(c.Servers)]
		db := pools[addr.String()]
		if db == nil {
			var err error
			if db, err = dbutil.Open(ctx, addr, c.Creds, ""); err != nil {
				return nil, err
			}
			pools[addr.String()] = db
		}
		schema := fmt.Sprintf("%s%d", c.SchemaPrefix, k)
		n := c.Employees
		if k <= len(c.Sizes) {
			n = c.Sizes[k-1]
		}
		// RANGE: shard k holds lower+1..lower+n. HASH: the keys 1..K*n it owns on the ring.
		lower := int64(k-1) * c.RangeWidth
		keys := func(yield func(int64) bool) {
			if !c.Hash {
				for j := int64(1); j <= int64(n); j++ {
					if !yield(lower + j) {
						return
					}
				}
				return
			}
			for e := int64(1); e <= int64(n*c.Shards); e++ {
				h, _ := keyspace.HashOf(e)
				if keyspace.Owner(points, h) == k-1 && !yield(e) {
					return
				}
			}
		}
		rows, err := seedShard(ctx, db, schema, keys, func(n int64) {
			if c.Progress != nil {
				c.Progress(k, n)
			}
		})
		if err != nil {
			return nil, fmt.Errorf("seed shard %s on %s: %w", schema, addr, err)
		}
		id, err := store.AddShard(ctx, addr.Host, addr.Port, schema)
		if err != nil {
			return nil, err
		}
		sh := SeededShard{ShardID: id, Server: addr.String(), Schema: schema, Lower: lower, Rows: rows}
		switch {
		case c.Hash:
			sh.Lower, sh.Point = 0, points[k-1]
			err = store.AddHashPoint(ctx, c.Function, points[k-1], id)
		case c.List:
			// Tenants lower+1..lower+2n: the second half has no rows yet, so
			// a write load can add tenants' first rows.
			var pts []string
			for j := int64(1); j <= 2*int64(n); j++ {
				pts = append(pts, fmt.Sprint(lower+j))
			}
			err = store.AddPoints(ctx, c.Function, pts, id)
		default:
			err = store.AddRange(ctx, c.Function, fmt.Sprint(lower), id)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, sh)
	}
	return out, nil
}

// existing returns seeded shard k if the shard map already maps its first key.
func existing(ctx context.Context, m *shardmap.Map, f shardmap.Function, c SeedConfig, k int, points []string, pools map[string]*sql.DB) (SeededShard, bool, error) {
	lower := int64(k-1) * c.RangeWidth
	for _, mp := range m.MappingsOf(f.ID) {
		switch {
		case c.Hash && mp.Hash != points[k-1],
			c.List && (mp.Point == nil || mp.Point.Int != lower+1),
			!c.Hash && !c.List && (mp.Lower == nil || mp.Lower.Int != lower):
			continue
		}
		loc, err := m.Location(mp.ShardID)
		if err != nil {
			return SeededShard{}, false, err
		}
		db := pools[loc.Addr().String()]
		if db == nil {
			if db, err = dbutil.Open(ctx, loc.Addr(), c.Creds, ""); err != nil {
				return SeededShard{}, false, err
			}
			pools[loc.Addr().String()] = db
		}
		rows, err := countRows(ctx, db, loc.Schema)
		if err != nil {
			return SeededShard{}, false, fmt.Errorf("seed: shard %d at %s/%s: %w", loc.ShardID, loc.Addr(), loc.Schema, err)
		}
		sh := SeededShard{ShardID: loc.ShardID, Server: loc.Addr().String(), Schema: loc.Schema, Lower: lower, Rows: rows}
		if c.Hash {
			sh.Lower, sh.Point = 0, mp.Hash
		}
		return sh, true, nil
	}
	return SeededShard{}, false, nil
}

// CreateEmployeesSchema creates an empty employees schema with its global departments rows.
func CreateEmployeesSchema(ctx context.Context, db *sql.DB, schema string) error {
	if _, err := db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+dbutil.QuoteIdent(schema)); err != nil {
		return err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "USE "+dbutil.QuoteIdent(schema)); err != nil {
		return err
	}
	for _, stmt := range EmployeesDDL {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	for _, d := range departments {
		if _, err := conn.ExecContext(ctx, "INSERT IGNORE INTO departments (dept_no, dept_name) VALUES (?, ?)", d[0], d[1]); err != nil {
			return err
		}
	}
	return nil
}

// RingPoint is the k-th (0-based) of n evenly spaced points on the MD5 ring.
func RingPoint(k, n int) string {
	step := new(big.Int).Div(new(big.Int).Lsh(big.NewInt(1), 128), big.NewInt(int64(n)))
	return fmt.Sprintf("%032x", new(big.Int).Mul(step, big.NewInt(int64(k))))
}

func seedShard(ctx context.Context, db *sql.DB, schema string, keys func(func(int64) bool), progress func(int64)) (int64, error) {
	if err := CreateEmployeesSchema(ctx, db, schema); err != nil {
		return 0, err
	}
	var have int64
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+dbutil.Table(schema, "employees")).Scan(&have); err != nil {
		return 0, err
	}
	if have > 0 {
		return countRows(ctx, db, schema)
	}
	w := newBatcher(ctx, db, schema, progress)
	var err error
	keys(func(emp int64) bool {
		if err = ctx.Err(); err == nil {
			err = w.employee(emp)
		}
		return err == nil
	})
	if err != nil {
		return 0, err
	}
	if err := w.flushAll(); err != nil {
		return 0, err
	}
	return countRows(ctx, db, schema)
}

func countRows(ctx context.Context, db *sql.DB, schema string) (int64, error) {
	var total int64
	for _, t := range ShardedTables {
		var n int64
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+dbutil.Table(schema, t)).Scan(&n); err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// batcher collects rows per table and writes multi-row INSERTs.
type batcher struct {
	ctx      context.Context
	db       *sql.DB
	schema   string
	cols     map[string][]string
	rows     map[string][][]any
	written  int64
	progress func(int64)
}

func newBatcher(ctx context.Context, db *sql.DB, schema string, progress func(int64)) *batcher {
	return &batcher{ctx: ctx, db: db, schema: schema, progress: progress, rows: map[string][][]any{}, cols: map[string][]string{
		"employees":    {"emp_no", "birth_date", "first_name", "last_name", "gender", "hire_date"},
		"salaries":     {"emp_no", "salary", "from_date", "to_date"},
		"titles":       {"emp_no", "title", "from_date", "to_date"},
		"dept_emp":     {"emp_no", "dept_no", "from_date", "to_date"},
		"dept_manager": {"emp_no", "dept_no", "from_date", "to_date"},
	}}
}

var firstNames = []string{"Georgi", "Bezalel", "Parto", "Chirstian", "Kyoichi", "Anneke", "Tzvetan", "Saniya", "Sumant", "Duangkaew", "Mary", "Patricio", "Eberhardt", "Berni", "Guoxiang"}
var lastNames = []string{"Facello", "Simmel", "Bamford", "Koblick", "Maliniak", "Preusig", "Zielinski", "Kalloufi", "Peac", "Piveteau", "Sluis", "Bridgland", "Terkki", "Genin", "Nooteboom"}
var titleNames = []string{"Engineer", "Senior Engineer", "Staff", "Senior Staff", "Assistant Engineer", "Technique Leader", "Manager"}

// Rows depend only on emp_no, so a seed is the same on every run.
func (b *batcher) employee(emp int64) error {
	r := rand.New(rand.NewSource(emp))
	day := func(base time.Time, maxDays int) time.Time { return base.AddDate(0, 0, r.Intn(maxDays)) }
	birth := day(time.Date(1952, 1, 1, 0, 0, 0, 0, time.UTC), 365*13)
	hire := day(time.Date(1985, 1, 1, 0, 0, 0, 0, time.UTC), 365*14)
	d := func(t time.Time) string { return t.Format("2006-01-02") }
	gender := "M"
	if r.Intn(2) == 0 {
		gender = "F"
	}
	b.add("employees", emp, d(birth), firstNames[r.Intn(len(firstNames))], lastNames[r.Intn(len(lastNames))], gender, d(hire))
	from := hire
	salary := 40000 + r.Intn(40000)
	for i, n := 0, 1+r.Intn(10); i < n; i++ {
		to := from.AddDate(1, 0, 0)
		b.add("salaries", emp, salary, d(from), d(to))
		from, salary = to, salary+r.Intn(3000)
	}
	t0 := titleNames[r.Intn(len(titleNames))]
	b.add("titles", emp, t0, d(hire), nil)
	if r.Intn(3) == 0 {
		b.add("titles", emp, "Senior "+t0, d(hire.AddDate(5, 0, 0)), nil)
	}
	dep := departments[r.Intn(len(departments))][0]
	b.add("dept_emp", emp, dep, d(hire), "9999-01-01")
	if r.Intn(10) == 0 {
		dep2 := departments[(r.Intn(len(departments)))][0]
		if dep2 != dep {
			b.add("dept_emp", emp, dep2, d(hire.AddDate(2, 0, 0)), "9999-01-01")
		}
	}
	if r.Intn(50) == 0 {
		b.add("dept_manager", emp, dep, d(hire.AddDate(3, 0, 0)), "9999-01-01")
	}
	for t, rows := range b.rows {
		if len(rows) >= 1000 {
			if err := b.flush(t); err != nil {
				return err
			}
		}
	}
	return nil
}

func (b *batcher) add(table string, vals ...any) { b.rows[table] = append(b.rows[table], vals) }

func (b *batcher) flush(table string) error {
	rows := b.rows[table]
	if len(rows) == 0 {
		return nil
	}
	cols := b.cols[table]
	tuple := "(" + dbutil.Placeholders(len(cols)) + ")"
	q := "INSERT INTO " + dbutil.Table(b.schema, table) + " (" + dbutil.QuoteIdents(cols) + ") VALUES " +
		strings.TrimSuffix(strings.Repeat(tuple+",", len(rows)), ",")
	args := make([]any, 0, len(rows)*len(cols))
	for _, r := range rows {
		args = append(args, r...)
	}
	if _, err := b.db.ExecContext(b.ctx, q, args...); err != nil {
		return fmt.Errorf("insert into %s.%s: %w", b.schema, table, err)
	}
	b.written += int64(len(rows))
	b.rows[table] = rows[:0]
	if b.progress != nil {
		b.progress(b.written)
	}
	return nil
}

func (b *batcher) flushAll() error {
	for _, t := range ShardedTables {
		if err := b.flush(t); err != nil {
			return err
		}
	}
	return nil
}
