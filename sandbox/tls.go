package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// TLSDir holds the sandbox's CA (ca.pem) and the servers' certificate
// (server-cert.pem, server-key.pem; names 127.0.0.1 and localhost), made with
// openssl when Config.TLS is set.
func (c Config) TLSDir() string { return filepath.Join(c.Dir, "tls") }

// MakeCA writes a new self-signed CA (ca.pem, ca-key.pem) into dir.
func MakeCA(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return openssl(ctx, dir, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca-key.pem", "-out", "ca.pem",
		"-days", "3650", "-subj", "/CN=shardctl sandbox CA")
}

// ensureTLS makes the CA and the server certificate once per sandbox.
func (c Config) ensureTLS(ctx context.Context) error {
	dir := c.TLSDir()
	if _, err := os.Stat(filepath.Join(dir, "server-cert.pem")); err == nil {
		return nil
	}
	if err := MakeCA(ctx, dir); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "san.ext"), []byte("subjectAltName=IP:127.0.0.1,DNS:localhost\n"), 0o644); err != nil {
		return err
	}
	if err := openssl(ctx, dir, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server-key.pem", "-out", "server.csr", "-subj", "/CN=127.0.0.1"); err != nil {
		return err
	}
	return openssl(ctx, dir, "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
		"-out", "server-cert.pem", "-days", "3650", "-extfile", "san.ext")
}

func openssl(ctx context.Context, dir string, args ...string) error {
	cmd := exec.CommandContext(ctx, "openssl", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("openssl %s: %v: %s", args[0], err, lastLines(out, 5))
	}
	return nil
}

// tlsArgs copies the certificate into server i's directory (a MySQL server
// sees only its root) and returns the server options that use it; in is
// that directory as the server sees it.
func (c Config) tlsArgs(i int, in string) ([]string, error) {
	if !c.TLS {
		return nil, nil
	}
	dst := filepath.Join(c.serverDir(i), "tls")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return nil, err
	}
	for _, f := range []string{"ca.pem", "server-cert.pem", "server-key.pem"} {
		b, err := os.ReadFile(filepath.Join(c.TLSDir(), f))
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dst, f), b, 0o600); err != nil {
			return nil, err
		}
	}
	return []string{"--ssl-ca=" + in + "/tls/ca.pem", "--ssl-cert=" + in + "/tls/server-cert.pem", "--ssl-key=" + in + "/tls/server-key.pem"}, nil
}
