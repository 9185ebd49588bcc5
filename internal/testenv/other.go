package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/sandbox"
)

// The other flavor's server: one per test binary, beside the shared sandbox,
// so the MariaDB pass and the MySQL pass of the suite both test moves in
// both directions. Tests give their schemas their own names on it.
var (
	otherOnce sync.Once
	other     *Env
	otherErr  error
)

// OtherFlavorName is the flavor the suite does not run: MySQL under the
// MariaDB pass, MariaDB under the MySQL pass.
func OtherFlavorName() string {
	if MySQL() {
		return sandbox.FlavorMariaDB
	}
	return sandbox.FlavorMySQL
}

// OtherFlavor returns one running server of the other flavor (started on
// first use, stopped when the test binary ends). It skips the test (fails
// it under CI) where that flavor cannot start.
func OtherFlavor(t testing.TB) *Env {
	t.Helper()
	Get(t)
	otherOnce.Do(func() {
		flavor := OtherFlavorName()
		if flavor == sandbox.FlavorMySQL {
			ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
			otherErr = sandbox.EnsureMySQLRoot(ctx)
			cancel()
		} else {
			_, otherErr = sandbox.Binary("mariadbd")
		}
		if otherErr != nil {
			otherErr = fmt.Errorf("no %s server to pair with: %w", flavor, otherErr)
			return
		}
		dir, err := os.MkdirTemp("", "shardctl-test-other-")
		if err != nil {
			otherErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		// server_ids apart from the shared sandbox's (1…3) and the fleets'.
		cfg, srv, err := UpOnFreePorts(ctx, 1, func(port int) sandbox.Config {
			return sandbox.Config{Dir: dir, Servers: 1, BasePort: port, Flavor: flavor, ServerIDBase: 90, DieWithParent: true, Lean: true}
		})
		if err != nil {
			fmt.Fprintf(os.Stderr, "testenv: the %s server did not start; the end of its error log:\n%s\n", flavor, logTail(cfg, 1))
			_ = sandbox.Down(context.Background(), cfg, true)
			otherErr = err
			return
		}
		other = &Env{Config: cfg, Servers: srv}
	})
	if otherErr != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v (CI is set, so this is a failure)", otherErr)
		}
		t.Skip(otherErr)
	}
	return other
}

// stopOther stops the other flavor's server, keeping its data when keep.
func stopOther(keep bool) {
	if other == nil {
		return
	}
	_ = sandbox.Down(context.Background(), other.Config, !keep)
	if keep {
		fmt.Fprintf(os.Stderr, "testenv: the %s server's data kept in %s\n", other.Config.Flavor, other.Config.Dir)
	}
}

// OtherDB opens a pool on the other flavor's server as the tool account,
// closed at test end.
func OtherDB(t testing.TB, schema string) (*sql.DB, dbutil.Addr) {
	t.Helper()
	o := OtherFlavor(t)
	return o.DB(t, 1, schema), o.Addr(1)
}
