// Package dbutil holds the small SQL helpers every other package shares:
// identifier quoting, connection opening with sane timeouts, and error
// classification. It never builds SQL by pasting values.
package dbutil

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/shardctl/shardctl/dbutil/ident"
)

func init() {
	// The driver logs dropped connections on its own; our callers report errors themselves.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
}

// QuoteIdent quotes a MySQL identifier with backticks, doubling any backtick inside it.
func QuoteIdent(name string) string { return ident.Quote(name) }

// QuoteIdents quotes each name and joins them with ", ".
func QuoteIdents(names []string) string { return ident.QuoteList(names) }

// Table returns `schema`.`table`.
func Table(schema, table string) string { return ident.Table(schema, table) }

// Placeholders returns "?, ?, ?" for n values.
func Placeholders(n int) string { return ident.Placeholders(n) }

// Creds are the account a connection logs in with. The password is never
// printed: String and errors built here leave it out.
type Creds struct {
	User     string
	Password string
	TLS      *TLSOptions // nil: preferred (TLS when the server offers it)
}

// Addr is a server address "host:port".
type Addr struct {
	Host string
	Port int
}

func (a Addr) String() string { return net.JoinHostPort(a.Host, strconv.Itoa(a.Port)) }

// ParseAddr parses "host:port" (port defaults to 3306 when omitted).
func ParseAddr(s string) (Addr, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Addr{}, fmt.Errorf("empty server address: give HOST:PORT, for example 127.0.0.1:3306")
	}
	host, portStr, err := net.SplitHostPort(s)
	if err != nil {
		if strings.Contains(err.Error(), "missing port") {
			return Addr{Host: s, Port: 3306}, nil
		}
		return Addr{}, fmt.Errorf("server address %q is not HOST:PORT: %w", s, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port <= 0 || port > 65535 {
		return Addr{}, fmt.Errorf("server address %q: port must be a number from 1 to 65535", s)
	}
	if host == "" {
		return Addr{}, fmt.Errorf("server address %q has no host", s)
	}
	return Addr{Host: host, Port: port}, nil
}

// Config builds a driver config for addr. schema may be empty.
func Config(addr Addr, creds Creds, schema string) *mysql.Config {
	c := mysql.NewConfig()
	c.User = creds.User
	c.Passwd = creds.Password
	c.Net = "tcp"
	c.Addr = addr.String()
	c.DBName = schema
	c.Timeout = 5 * time.Second
	c.ReadTimeout = 0
	c.WriteTimeout = 0
	// Client-side interpolation: one round trip per statement and exact
	// byte forwarding of row values; the driver escapes every value.
	c.InterpolateParams = true
	c.MultiStatements = false
	c.Collation = "utf8mb4_general_ci"
	c.AllowNativePasswords = true
	// TLS as the credentials say; by default when the server offers it (MySQL
	// does): MySQL's caching_sha2_password accounts need it, or a key
	// exchange, to log in.
	applyTLS(c, addr.Host, creds.TLS)
	return c
}

// Open opens a pool to addr and checks that it answers. Errors never carry the password.
func Open(ctx context.Context, addr Addr, creds Creds, schema string) (*sql.DB, error) {
	return OpenConfig(ctx, Config(addr, creds, schema))
}

// Pool opens a pool to addr without connecting: for a server that may be
// down now and is retried later (a watched replica).
func Pool(addr Addr, creds Creds, schema string) (*sql.DB, error) {
	return pool(Config(addr, creds, schema))
}

func pool(cfg *mysql.Config) (*sql.DB, error) {
	if cfg.DialFunc == nil {
		cfg = cfg.Clone()
		watchConfig(cfg) // every pool's connections are watched (watchdog.go)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, Redact(fmt.Errorf("connect to %s: %w", cfg.Addr, err), cfg.Passwd)
	}
	db := sql.OpenDB(conn)
	db.SetConnMaxIdleTime(time.Minute)
	return db, nil
}

// OpenConfig opens a pool for an already-built config and pings it.
func OpenConfig(ctx context.Context, cfg *mysql.Config) (*sql.DB, error) {
	db, err := pool(cfg)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, Redact(describeConnErr(cfg, err), cfg.Passwd)
	}
	return db, nil
}

func describeConnErr(cfg *mysql.Config, err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1045:
			if cfg.TLSConfig == "false" { // --tls off
				return fmt.Errorf("connect to %s as %q: access denied (check the user and the password; or the server requires TLS, which --tls off refuses): %w", cfg.Addr, cfg.User, err)
			}
			return fmt.Errorf("connect to %s as %q: access denied (check the user and the password in SHARDCTL_PASSWORD or the config file): %w", cfg.Addr, cfg.User, err)
		case 3159: // ER_SECURE_TRANSPORT_REQUIRED
			return fmt.Errorf("connect to %s: the server requires TLS (require_secure_transport), which --tls off refuses: %w", cfg.Addr, err)
		case 1049:
			return fmt.Errorf("connect to %s: database %q does not exist (run 'shardctl shardmap init' for the shard map): %w", cfg.Addr, cfg.DBName, err)
		}
		return fmt.Errorf("connect to %s: %w", cfg.Addr, err)
	}
	if msg := err.Error(); strings.Contains(msg, "x509") || strings.Contains(msg, "TLS") || strings.Contains(msg, "tls:") {
		return fmt.Errorf("connect to %s: TLS failed (check --tls, --tls-ca and the server's certificate): %w", cfg.Addr, err)
	}
	return fmt.Errorf("connect to %s: server unreachable or not answering (is it running, and is the address right?): %w", cfg.Addr, err)
}

// redactedError hides a secret in an error's text while keeping errors.Is/As working.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// Redact returns err with every occurrence of secret replaced by "*****".
func Redact(err error, secret string) error {
	if err == nil || secret == "" || !strings.Contains(err.Error(), secret) {
		return err
	}
	return &redactedError{msg: strings.ReplaceAll(err.Error(), secret, "*****"), err: err}
}

// ErrNumber returns the server error number of err, or 0.
func ErrNumber(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// IsRetryableLockErr reports lock wait timeouts and deadlocks, which a short retry cures.
func IsRetryableLockErr(err error) bool {
	switch ErrNumber(err) {
	case 1205, 1213: // ER_LOCK_WAIT_TIMEOUT, ER_LOCK_DEADLOCK
		return true
	}
	return false
}

// Querier is what *sql.DB, *sql.Conn and *sql.Tx have in common.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// InTx runs fn in a transaction and commits it, rolling back on error.
func InTx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// FenceTable is the one-row table of an armed fence (package fence), kept
// in the fenced shard's schema: listings of a shard's tables leave it out.
const FenceTable = "_shardctl_fence"
