package dbutil

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/go-sql-driver/mysql"
)

// TLS modes, as MySQL's client names them (--ssl-mode).
const (
	TLSOff            = "off"
	TLSPreferred      = "preferred" // TLS when the server offers it, unverified; plain otherwise
	TLSRequired       = "required"  // TLS or no connection, certificate not checked
	TLSVerifyCA       = "verify-ca" // the certificate must be signed by the CA in TLSOptions.CA
	TLSVerifyIdentity = "verify-identity"
)

// TLSOptions say how connections (servers, binlog reader, sharding
// database) use TLS; they travel with the credentials (Creds.TLS).
type TLSOptions struct {
	Mode  string
	CA    string // PEM file of the CA that signs the servers' certificates (verify-ca, verify-identity)
	Cert  string // PEM client certificate (optional; with Key)
	Key   string
	certs []tls.Certificate
	pool  *x509.CertPool
}

// NewTLS checks TLS options and loads their files; the result goes into
// Creds.TLS, so every connection made with those credentials uses it. Bad
// input (an unknown mode, unreadable files, a verify mode without a CA) is an
// error that says what to give.
func NewTLS(o TLSOptions) (*TLSOptions, error) {
	if o.Mode == "" {
		o.Mode = TLSPreferred
	}
	switch o.Mode {
	case TLSOff, TLSPreferred, TLSRequired, TLSVerifyCA, TLSVerifyIdentity:
	default:
		return nil, fmt.Errorf("--tls %q: give off, preferred, required, verify-ca or verify-identity", o.Mode)
	}
	if (o.Cert == "") != (o.Key == "") {
		return nil, errors.New("--tls-cert and --tls-key go together: give both or neither")
	}
	if o.Cert != "" {
		c, err := tls.LoadX509KeyPair(o.Cert, o.Key)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		o.certs = []tls.Certificate{c}
	}
	if o.Mode == TLSVerifyCA || o.Mode == TLSVerifyIdentity {
		if o.CA == "" {
			return nil, fmt.Errorf("--tls %s needs --tls-ca FILE (the CA that signs the servers' certificates)", o.Mode)
		}
	}
	if o.CA != "" {
		pem, err := os.ReadFile(o.CA)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		o.pool = x509.NewCertPool()
		if !o.pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s holds no PEM certificate", o.CA)
		}
	}
	return &o, nil
}

// preferred is the options of credentials that name none.
var preferred = &TLSOptions{Mode: TLSPreferred}

func (o *TLSOptions) orDefault() *TLSOptions {
	if o == nil {
		return preferred
	}
	return o
}

// TLSMode is the mode in force for these options (nil: preferred).
func (o *TLSOptions) TLSMode() string { return o.orDefault().Mode }

// Client is the tls.Config for a connection to host, or nil for plain
// connections (off; preferred leaves the choice to the caller).
func (o *TLSOptions) Client(host string) *tls.Config {
	o = o.orDefault()
	switch o.Mode {
	case TLSOff:
		return nil
	}
	c := &tls.Config{Certificates: o.certs, RootCAs: o.pool, MinVersion: tls.VersionTLS12}
	switch o.Mode {
	case TLSPreferred, TLSRequired:
		c.InsecureSkipVerify = true
	case TLSVerifyCA:
		// The chain must lead to the CA; the name is not checked.
		c.InsecureSkipVerify = true
		pool := o.pool
		c.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 {
				return errors.New("TLS: the server sent no certificate")
			}
			certs := make([]*x509.Certificate, len(raw))
			for i, r := range raw {
				cert, err := x509.ParseCertificate(r)
				if err != nil {
					return fmt.Errorf("TLS: server certificate: %w", err)
				}
				certs[i] = cert
			}
			inter := x509.NewCertPool()
			for _, cert := range certs[1:] {
				inter.AddCert(cert)
			}
			if _, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter}); err != nil {
				return fmt.Errorf("TLS: the server's certificate is not signed by the CA in --tls-ca: %w", err)
			}
			return nil
		}
	case TLSVerifyIdentity:
		c.ServerName = host // empty: the driver fills in the host of its address
	}
	return c
}

// applyTLS sets a driver config's TLS from the options.
func applyTLS(c *mysql.Config, host string, o *TLSOptions) {
	o = o.orDefault()
	switch o.Mode {
	case TLSOff:
		c.TLSConfig = "false"
	case TLSPreferred:
		c.TLSConfig = "preferred"
		if len(o.certs) > 0 {
			c.TLS = o.Client(host)
			c.AllowFallbackToPlaintext = true
		}
	default:
		c.TLS = o.Client(host)
	}
}
