package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/sandbox"
	"github.com/shardctl/shardctl/shardmap"
)

// TestTLSRequiredEverywhere: every server (shard map included) has
// require_secure_transport=ON; a move under load passes with
// --tls verify-identity (config file), while a wrong CA and --tls off are
// refused with errors that say so.
func TestTLSRequiredEverywhere(t *testing.T) {
	env := testenv.Get(t)
	upCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	sb, srv, err := testenv.UpOnFreePorts(upCtx, 2, func(port int) sandbox.Config {
		return sandbox.Config{Dir: t.TempDir(), Servers: 2, BasePort: port, Flavor: testenv.Flavor(), ServerIDBase: 20, TLS: true, DieWithParent: true, Lean: true,
			ExtraArgs: []string{"--require-secure-transport=ON"}}
	})
	cancel()
	t.Cleanup(func() { _ = sandbox.Down(context.Background(), sb, true) })
	if err != nil {
		t.Fatal(err)
	}
	a1, a2 := srv[0].Addr(), srv[1].Addr()
	ca := filepath.Join(sb.TLSDir(), "ca.pem")

	const name = "e2e_tls"
	c := &cluster{t: t, env: env, name: name, dir: t.TempDir()}
	c.planDir = filepath.Join(c.dir, "plans")
	c.store = shardmap.New(openAt(t, a1), name)
	c.shards, err = sandbox.Seed(ctx, c.store, sandbox.SeedConfig{Servers: []dbutil.Addr{a1}, Creds: sandbox.Creds(), Shards: 1, Sizes: []int{300}, SchemaPrefix: name + "_s"})
	if err != nil {
		t.Fatal(err)
	}
	c.config = filepath.Join(c.dir, "shardctl.yaml")
	body := fmt.Sprintf("shardmap: %s/%s\nuser: %s\npassword: %s\nplan-dir: %s\ntls: verify-identity\ntls-ca: %s\n",
		a1, name, sandbox.ToolUser, sandbox.ToolPassword, c.planDir, ca)
	if err := os.WriteFile(c.config, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}

	lp := c.startLoad(100, c.keys("moving", 1, 300))
	c.mustRun("move", "--shard", "1", "--to", a2.String(), "--yes", "--max-blackout", "5s")
	lp.stop(t)
	c.checkLedger(lp)
	m, err := c.store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := m.Location(1); l.Addr() != a2 {
		t.Errorf("shard 1 is at %s, want %s", l.Addr(), a2)
	}

	// A CA that did not sign the servers' certificate is refused.
	other := t.TempDir()
	if err := sandbox.MakeCA(ctx, other); err != nil {
		t.Fatal(err)
	}
	r := c.run(nil, "status", "--tls", "verify-ca", "--tls-ca", filepath.Join(other, "ca.pem"))
	if r.code == 0 || !strings.Contains(r.stderr, "not signed by the CA in --tls-ca") {
		t.Errorf("a wrong CA: exit %d\n%s", r.code, r.stderr)
	}
	// Without TLS the servers refuse the connection.
	r = c.run(nil, "status", "--tls", "off")
	if r.code == 0 || !strings.Contains(r.stderr, "requires TLS") {
		t.Errorf("--tls off against require_secure_transport: exit %d\n%s", r.code, r.stderr)
	}
	t.Logf("refusals: %s", strings.TrimSpace(r.stderr))
}
