package natstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// TLSFiles are PEM files made for one test: a CA, a server certificate for
// 127.0.0.1 and localhost, and a client certificate, all signed by the CA.
type TLSFiles struct {
	CA                    string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// NewTLSFiles generates a CA and certificates in t.TempDir().
func NewTLSFiles(t testing.TB) TLSFiles {
	t.Helper()
	dir := t.TempDir()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "natstest CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("natstest: CA certificate: %v", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatalf("natstest: parse CA: %v", err)
	}
	f := TLSFiles{CA: filepath.Join(dir, "ca.pem")}
	writePEM(t, f.CA, "CERTIFICATE", caDER)
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage) (string, string) {
		key := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			DNSNames:     []string{"localhost"},
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatalf("natstest: %s certificate: %v", name, err)
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatalf("natstest: %s key: %v", name, err)
		}
		cert, keyFile := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		writePEM(t, cert, "CERTIFICATE", der)
		writePEM(t, keyFile, "EC PRIVATE KEY", keyDER)
		return cert, keyFile
	}
	f.ServerCert, f.ServerKey = leaf(2, "server", x509.ExtKeyUsageServerAuth)
	f.ClientCert, f.ClientKey = leaf(3, "client", x509.ExtKeyUsageClientAuth)
	return f
}

// ServerTLSConfig is the server side of f: its certificate, and client
// certificates required and verified against the CA.
func (f TLSFiles) ServerTLSConfig(t testing.TB) *tls.Config {
	t.Helper()
	cfg, err := server.GenTLSConfig(&server.TLSConfigOpts{
		CertFile: f.ServerCert, KeyFile: f.ServerKey, CaFile: f.CA, Verify: true,
	})
	if err != nil {
		t.Fatalf("natstest: server TLS config: %v", err)
	}
	return cfg
}

// RunTLSServer is [RunServer] with TLS required and client certificates
// verified (mutual TLS).
func RunTLSServer(t testing.TB, f TLSFiles) *server.Server {
	t.Helper()
	return RunServerWith(t, func(o *server.Options) {
		o.TLSConfig = f.ServerTLSConfig(t)
		o.TLS, o.TLSVerify = true, true
	})
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("natstest: key: %v", err)
	}
	return k
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatalf("natstest: write %s: %v", path, err)
	}
}
