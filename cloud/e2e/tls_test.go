package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/tlsconf/tlstest"
)

// trustOnly makes the test's HTTP client (http.DefaultClient, which the
// harness uses) trust roots alone, and the binaries it starts trust the CA
// in caFile (SSL_CERT_FILE, read by Go's TLS on Linux), for the rest of
// the test. Tests that call it cannot run in parallel (t.Setenv).
func trustOnly(t *testing.T, roots *x509.CertPool, caFile string) {
	t.Setenv("SSL_CERT_FILE", caFile)
	prev := http.DefaultClient
	http.DefaultClient = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	t.Cleanup(func() { http.DefaultClient = prev })
}

// servedSerial is the serial number of the certificate the server at addr
// shows on a new connection for serverName.
func servedSerial(t *testing.T, addr, serverName string, roots *x509.CertPool) *big.Int {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{ServerName: serverName, RootCAs: roots})
	require.NoError(t, err)
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}

// redirectingCloudEnv is the environment of a cloud on addr, on a fresh
// SQLite database, with its plain-HTTP listener on redirectAddr and the
// extra settings (its certificates) after.
func redirectingCloudEnv(t *testing.T, addr, redirectAddr string, extra ...string) []string {
	return append([]string{
		"RELAY_LISTEN=" + addr,
		"RELAY_DATABASE_URL=sqlite:" + filepath.Join(t.TempDir(), "cloud.db"),
		"RELAY_ADMIN_TOKEN=" + adminToken,
		"RELAY_DATA_DIR=" + t.TempDir(),
		"RELAY_HTTP_REDIRECT_LISTEN=" + redirectAddr,
	}, extra...)
}

// noRedirects is a plain-HTTP client that shows redirects rather than
// following them.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// TestTLSEndToEnd: cloud serve with a certificate and key from files (a CA
// made by the test): a host claims over HTTPS, trusting the CA through
// SSL_CERT_FILE, heartbeats and gets a webhook sent over HTTPS; answers
// carry HSTS; the plain-HTTP listener redirects to HTTPS and reads at most
// 16 KiB of headers. The certificate
// is then replaced on disk: new connections get the new one with the cloud
// still running, and the host, restarted, handshakes with it and gets the
// next webhook.
func TestTLSEndToEnd(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t)
	caFile := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(caFile, ca.CertPEM, 0o600))
	trustOnly(t, ca.Pool(), caFile)
	first := ca.Issue(t, "127.0.0.1", "localhost")
	certFile, keyFile := first.Write(t, dir)

	addr, redirectAddr := freeAddr(t), freeAddr(t)
	env := redirectingCloudEnv(t, addr, redirectAddr,
		"RELAY_TLS_CERT="+certFile,
		"RELAY_TLS_KEY="+keyFile,
	)
	c := &cloud{proc: startProc(t, "cloud", env, "serve"), url: "https://" + addr}
	c.waitReady()
	require.Equal(t, first.Cert.SerialNumber, servedSerial(t, addr, "localhost", ca.Pool()))

	resp, err := http.Get(c.url + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, "max-age=31536000", resp.Header.Get("Strict-Transport-Security"))

	// Over HTTPS the console's session cookie is Secure.
	login := &http.Client{Transport: http.DefaultClient.Transport, CheckRedirect: noRedirects.CheckRedirect}
	resp, err = login.PostForm(c.url+"/console/login", url.Values{"token": {adminToken}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Len(t, resp.Cookies(), 1)
	require.Equal(t, "relay_session", resp.Cookies()[0].Name)
	require.True(t, resp.Cookies()[0].Secure)
	require.Equal(t, "max-age=31536000", resp.Header.Get("Strict-Transport-Security"))

	_, port, _ := net.SplitHostPort(addr)
	resp, err = noRedirects.Get("http://" + redirectAddr + "/api/hosts?limit=1")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusPermanentRedirect, resp.StatusCode)
	require.Equal(t, "https://127.0.0.1:"+port+"/api/hosts?limit=1", resp.Header.Get("Location"))
	// The redirect listener's bound on what a request may make it read.
	req, _ := http.NewRequest("GET", "http://"+redirectAddr+"/", nil)
	req.Header.Set("X-Filler", strings.Repeat("a", 32<<10))
	resp, err = noRedirects.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode, "headers past 16 KiB are refused")

	hostID, code := c.newHost("tls", secret)
	rc := startReceiver(t)
	h := claimAndStartHost(t, c.url, code, rc.url)
	body := []byte(`{"ref":"refs/heads/main"}`)
	id1 := sendGitHub(t, c.url, hostID, "push", "tls-1", body)
	eventually(t, 30*time.Second, "the first webhook handled over HTTPS", func() bool { return h.ledgerResult(id1) == "success" })

	second := ca.Issue(t, "127.0.0.1", "localhost")
	second.Write(t, dir)
	require.Equal(t, second.Cert.SerialNumber, servedSerial(t, addr, "localhost", ca.Pool()),
		"the certificate replaced on disk is served without a restart")
	select {
	case <-c.done:
		t.Fatal("the cloud exited")
	default:
	}
	h.restart()
	id2 := sendGitHub(t, c.url, hostID, "push", "tls-2", body)
	eventually(t, 30*time.Second, "the second webhook handled after the swap", func() bool { return h.ledgerResult(id2) == "success" })
	require.Equal(t, 2, rc.count())
}

// TestACMEServe: cloud serve with RELAY_ACME_DOMAINS, as far as it goes
// without an ACME CA: the certificate found in RELAY_ACME_CACHE (in
// autocert's format) is served for the domain, with no call to the
// directory (an address where nothing listens); a name that is not one of
// the domains gets no certificate; the plain-HTTP listener answers ACME
// challenge paths itself and redirects the rest to HTTPS.
func TestACMEServe(t *testing.T) {
	const domain = "relay.example.test"
	cache := t.TempDir()
	leaf := (*tlstest.CA)(nil).Issue(t, domain)
	require.NoError(t, os.WriteFile(filepath.Join(cache, domain), append(bytes.Clone(leaf.KeyPEM), leaf.CertPEM...), 0o600))
	roots := x509.NewCertPool()
	roots.AddCert(leaf.Cert)

	addr, redirectAddr := freeAddr(t), freeAddr(t)
	env := redirectingCloudEnv(t, addr, redirectAddr,
		"RELAY_ACME_DOMAINS="+domain,
		"RELAY_ACME_CACHE="+cache,
		"RELAY_ACME_EMAIL=ops@example.test",
		"RELAY_ACME_DIRECTORY_URL=https://127.0.0.1:1/directory",
		"RELAY_PUBLIC_URL=https://"+domain,
	)
	p := startProc(t, "cloud", env, "serve")
	// The domain resolves to the cloud's address for this client.
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}}
	eventually(t, 30*time.Second, "cloud ready over HTTPS with the cached certificate", func() bool {
		p.mustBeRunning()
		resp, err := client.Get("https://" + domain + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200 && resp.Header.Get("Strict-Transport-Security") != ""
	})
	require.Equal(t, leaf.Cert.SerialNumber, servedSerial(t, addr, domain, roots))
	_, err := tls.Dial("tcp", addr, &tls.Config{ServerName: "other.example.test", InsecureSkipVerify: true})
	require.Error(t, err, "a name outside RELAY_ACME_DOMAINS gets no certificate")

	req, _ := http.NewRequest("GET", "http://"+redirectAddr+"/.well-known/acme-challenge/no-such-token", nil)
	req.Host = domain
	resp, err := noRedirects.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 404, resp.StatusCode, "a challenge path is the ACME handler's")
	req, _ = http.NewRequest("GET", "http://"+redirectAddr+"/readyz", nil)
	req.Host = domain
	resp, err = noRedirects.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusPermanentRedirect, resp.StatusCode)
	require.Equal(t, "https://"+domain+"/readyz", resp.Header.Get("Location"), "redirects go to RELAY_PUBLIC_URL's host")
}
