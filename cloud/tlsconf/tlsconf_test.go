package tlsconf_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/tlsconf"
	"github.com/relaykit/relay/cloud/tlsconf/tlstest"
)

// serveTLS serves 200 "ok" with setup's TLS on a loopback port.
func serveTLS(t *testing.T, setup *tlsconf.Setup) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: tlsconf.HSTS(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})), TLSConfig: setup.TLS, ErrorLog: log.New(io.Discard, "", 0)}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// peer is the certificate the server at addr shows for serverName, which
// must verify against roots.
func peer(t *testing.T, addr, serverName string, roots *x509.CertPool) *x509.Certificate {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{ServerName: serverName, RootCAs: roots})
	require.NoError(t, err)
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

// TestFileCertReloaded: a certificate replaced on disk is served from the
// next handshake on, without a restart; a broken pair (the certificate
// renewed, its key not yet) keeps the previous one until the key follows.
func TestFileCertReloaded(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t)
	first := ca.Issue(t, "127.0.0.1", "localhost")
	certFile, keyFile := first.Write(t, dir)
	setup, err := tlsconf.New(tlsconf.Config{CertFile: certFile, KeyFile: keyFile})
	require.NoError(t, err)
	addr := serveTLS(t, setup)
	require.Equal(t, first.Cert.SerialNumber, peer(t, addr, "localhost", ca.Pool()).SerialNumber)

	second := ca.Issue(t, "127.0.0.1", "localhost")
	tlstest.WriteFile(t, certFile, second.CertPEM) // the key is still the first's
	require.Equal(t, first.Cert.SerialNumber, peer(t, addr, "localhost", ca.Pool()).SerialNumber,
		"a certificate without its key is not served")
	tlstest.WriteFile(t, keyFile, second.KeyPEM)
	require.Equal(t, second.Cert.SerialNumber, peer(t, addr, "localhost", ca.Pool()).SerialNumber)

	// Written in place (same file, same size), as cp does.
	third := ca.Issue(t, "127.0.0.1", "localhost")
	require.NoError(t, os.WriteFile(keyFile, third.KeyPEM, 0o600))
	require.NoError(t, os.WriteFile(certFile, third.CertPEM, 0o600))
	require.NoError(t, setup.Reload(), "SIGHUP's reload")
	require.Equal(t, third.Cert.SerialNumber, peer(t, addr, "localhost", ca.Pool()).SerialNumber)

	require.NoError(t, os.Remove(keyFile))
	require.Error(t, setup.Reload())
	require.Equal(t, third.Cert.SerialNumber, peer(t, addr, "localhost", ca.Pool()).SerialNumber, "a missing key keeps the pair served")
}

func TestFileCertMustLoadAtStart(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t)
	certFile, _ := ca.Issue(t, "localhost").Write(t, dir)
	_, otherKey := ca.Issue(t, "localhost").Write(t, t.TempDir())
	_, err := tlsconf.New(tlsconf.Config{CertFile: certFile, KeyFile: otherKey})
	require.ErrorContains(t, err, "private key does not match")
	_, err = tlsconf.New(tlsconf.Config{CertFile: certFile, KeyFile: filepath.Join(dir, "missing")})
	require.Error(t, err)
}

// TestACME: as far as ACME goes without a CA on the internet. The
// certificate autocert finds in its cache is served for the configured
// domains; another name is refused at the handshake, before any ACME call;
// the HTTP listener answers challenge paths itself (404 for a token it
// does not have, 403 for a host it does not serve) and redirects the rest.
func TestACME(t *testing.T) {
	cache := t.TempDir()
	leaf := (*tlstest.CA)(nil).Issue(t, "relay.example.test") // self-signed
	// autocert's cache entry for an ECDSA certificate: the key, then the chain.
	require.NoError(t, os.WriteFile(filepath.Join(cache, "relay.example.test"), append(bytes.Clone(leaf.KeyPEM), leaf.CertPEM...), 0o600))
	setup, err := tlsconf.New(tlsconf.Config{
		ACMEDomains: []string{"relay.example.test"}, ACMECacheDir: cache,
		// Never reached: the test fails rather than call out if it were.
		ACMEDirectoryURL: "https://127.0.0.1:1/directory",
		HTTPSPort:        "8443",
	})
	require.NoError(t, err)
	require.Contains(t, setup.TLS.NextProtos, "acme-tls/1", "TLS-ALPN-01 challenges are answered on the HTTPS port")
	addr := serveTLS(t, setup)

	roots := x509.NewCertPool()
	roots.AddCert(leaf.Cert)
	require.Equal(t, leaf.Cert.SerialNumber, peer(t, addr, "relay.example.test", roots).SerialNumber)
	_, err = tls.Dial("tcp", addr, &tls.Config{ServerName: "other.example.test", InsecureSkipVerify: true})
	require.ErrorContains(t, err, "tls: internal error", "a name outside RELAY_ACME_DOMAINS gets no certificate")

	h := setup.HTTP
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "http://relay.example.test/.well-known/acme-challenge/unknown-token", nil))
	require.Equal(t, 404, rec.Code)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "http://other.example.test/.well-known/acme-challenge/unknown-token", nil))
	require.Equal(t, 403, rec.Code)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "http://relay.example.test/readyz?x=1", nil))
	require.Equal(t, http.StatusPermanentRedirect, rec.Code)
	require.Equal(t, "https://relay.example.test:8443/readyz?x=1", rec.Header().Get("Location"))
}

func TestRedirect(t *testing.T) {
	for _, c := range []struct{ host, port, url, want string }{
		{"", "443", "http://relay.example.com/api/hosts?a=b", "https://relay.example.com/api/hosts?a=b"},
		{"", "8443", "http://relay.example.com:8080/x", "https://relay.example.com:8443/x"},
		{"", "443", "http://[2001:db8::1]:80/x", "https://[2001:db8::1]/x"},
		{"", "8443", "http://[2001:db8::1]/x", "https://[2001:db8::1]:8443/x"},
		{"relay.example.com", "8443", "http://10.0.0.1/api/webhooks/h/github", "https://relay.example.com/api/webhooks/h/github"},
	} {
		rec := httptest.NewRecorder()
		tlsconf.Redirect(c.host, c.port).ServeHTTP(rec, httptest.NewRequest("POST", c.url, nil))
		require.Equal(t, http.StatusPermanentRedirect, rec.Code, c.url)
		require.Equal(t, c.want, rec.Header().Get("Location"), c.url)
	}
}

func TestHSTS(t *testing.T) {
	rec := httptest.NewRecorder()
	tlsconf.HSTS(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	require.Equal(t, "max-age=31536000", rec.Header().Get("Strict-Transport-Security"))
}
