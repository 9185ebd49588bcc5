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

// Kind is a server of a flavor and version: the sandbox's own (Flavor(),
// Version()) or another one a test pairs with it.
type Kind struct {
	Flavor  string
	Version string // sandbox.VersionSystem or sandbox.Version118
}

// MariaDB118 is MariaDB 11.8, from its own root beside the system's 10.11.
var MariaDB118 = Kind{Flavor: sandbox.FlavorMariaDB, Version: sandbox.Version118}

// This is the kind of the sandbox the pass runs.
func This() Kind { return Kind{Flavor: Flavor(), Version: Version()} }

// OtherFlavorKind is the other flavor's server.
func OtherFlavorKind() Kind { return Kind{Flavor: OtherFlavorName()} }

func (k Kind) String() string {
	if k.Version != sandbox.VersionSystem {
		return k.Flavor + "-" + k.Version
	}
	return k.Flavor
}

// MySQL reports an Oracle MySQL server.
func (k Kind) MySQL() bool { return k.Flavor == sandbox.FlavorMySQL }

// Others are the servers the cross-server e2e tests pair the pass's own
// with, each a subtest: the other flavor, and MariaDB 11.8 (the MariaDB
// pass's upgrade, the MySQL pass's other MariaDB) unless the pass runs it.
func Others() []Kind {
	ks := []Kind{OtherFlavorKind()}
	if This() != MariaDB118 {
		ks = append(ks, MariaDB118)
	}
	return ks
}

// One server of each other kind per test binary, beside the shared sandbox,
// so each pass of the suite tests moves in both directions. Tests give their
// schemas their own names on it.
type otherServer struct {
	once sync.Once
	env  *Env
	err  error
}

var (
	othersMu sync.Mutex
	others   = map[Kind]*otherServer{}
)

// server_ids apart from the shared sandbox's (1…3), the fleets' and each
// other's, so a server of each kind can pair with the sandbox at once.
var otherIDBase = map[Kind]int{MariaDB118: 93}

// OtherFlavorName is the flavor the suite does not run: MySQL under the
// MariaDB pass, MariaDB under the MySQL pass.
func OtherFlavorName() string {
	if MySQL() {
		return sandbox.FlavorMariaDB
	}
	return sandbox.FlavorMySQL
}

// OtherFlavor returns one running server of the other flavor.
func OtherFlavor(t testing.TB) *Env { return Other(t, OtherFlavorKind()) }

// Other returns one running server of kind k (started on first use,
// stopped when the test binary ends; its root built if missing). It skips
// the test (fails it under CI) where that server cannot start.
func Other(t testing.TB, k Kind) *Env {
	t.Helper()
	Get(t)
	othersMu.Lock()
	o := others[k]
	if o == nil {
		o = &otherServer{}
		others[k] = o
	}
	othersMu.Unlock()
	o.once.Do(func() { o.env, o.err = startOther(k) })
	if o.err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v (CI is set, so this is a failure)", o.err)
		}
		t.Skip(o.err)
	}
	return o.env
}

func startOther(k Kind) (*Env, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	err := sandbox.EnsureRoot(ctx, k.Flavor, k.Version)
	cancel()
	if _, chrooted := sandbox.RootFor(k.Flavor, k.Version); err == nil && !chrooted {
		_, err = sandbox.Binary("mariadbd")
	}
	if err != nil {
		return nil, fmt.Errorf("no %s server to pair with: %w", k, err)
	}
	dir, err := os.MkdirTemp("", "shardctl-test-other-")
	if err != nil {
		return nil, err
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	base, ok := otherIDBase[k]
	if !ok {
		base = 90
	}
	cfg, srv, err := UpOnFreePorts(ctx, 1, func(port int) sandbox.Config {
		return sandbox.Config{Dir: dir, Servers: 1, BasePort: port, Flavor: k.Flavor, Version: k.Version, ServerIDBase: base, DieWithParent: true, Lean: true}
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: the %s server did not start; the end of its error log:\n%s\n", k, logTail(cfg, 1))
		_ = sandbox.Down(context.Background(), cfg, true)
		return nil, err
	}
	return &Env{Config: cfg, Servers: srv}, nil
}

// stopOthers stops the other servers, keeping their data when keep.
func stopOthers(keep bool) {
	othersMu.Lock()
	defer othersMu.Unlock()
	for k, o := range others {
		if o.env == nil {
			continue
		}
		_ = sandbox.Down(context.Background(), o.env.Config, !keep)
		if keep {
			fmt.Fprintf(os.Stderr, "testenv: the %s server's data kept in %s\n", k, o.env.Config.Dir)
		}
	}
}

// OtherDB opens a pool on the other flavor's server as the tool account,
// closed at test end.
func OtherDB(t testing.TB, schema string) (*sql.DB, dbutil.Addr) {
	t.Helper()
	o := OtherFlavor(t)
	return o.DB(t, 1, schema), o.Addr(1)
}
