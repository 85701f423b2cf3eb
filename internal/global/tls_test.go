package global

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// writeCert writes a self-signed certificate for 127.0.0.1 and its key
// into dir and returns their paths and the certificate's pool.
func writeCert(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "sluice test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// Ensure that a Store decides over TLS with a password, and that a client
// that does not trust the server's certificate is refused.
func TestStoreTLS(t *testing.T) {
	certFile, keyFile, pool := writeCert(t, t.TempDir())
	port := redistest.FreePort(t)
	srv := redistest.Start(t, "--tls-port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", certFile,
		"--tls-auth-clients", "no", "--requirepass", "s3cret")
	addr := "127.0.0.1:" + strconv.Itoa(port)
	s := newStore(t, Options{Addrs: []string{addr}, Password: "s3cret",
		TLS: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}})
	l := tokenBucket(2, hour)
	for i, want := range []bool{true, true, false} {
		d, err := s.Decide(context.Background(), Request{Limit: l, Key: "tls", Cost: 1})
		if err != nil || d.Allowed != want {
			t.Fatalf("request %d over TLS: %+v, %v; want allowed %v\n%s", i, d, err, want, srv.Log())
		}
	}
	untrusted := newStore(t, Options{Addrs: []string{addr}, Password: "s3cret",
		TLS: &tls.Config{RootCAs: x509.NewCertPool()}})
	if _, err := untrusted.Decide(context.Background(), Request{Limit: l, Key: "tls", Cost: 1}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("an untrusted certificate: %v, want ErrUnavailable", err)
	}
}
