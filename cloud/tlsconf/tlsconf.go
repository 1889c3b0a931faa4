// Package tlsconf is the TLS of `cloud serve`: a certificate and key from
// files, read again when they change on disk, or certificates obtained
// with ACME (Let's Encrypt) for a list of domains; the plain-HTTP listener
// that answers ACME's HTTP-01 challenges and redirects everything else to
// HTTPS; and HSTS on the HTTPS answers.
package tlsconf

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"

	"golang.org/x/crypto/acme"
	"golang.org/x/crypto/acme/autocert"
)

// Config says where certificates come from: CertFile and KeyFile, or
// ACMEDomains (not both).
type Config struct {
	CertFile, KeyFile string

	ACMEDomains      []string
	ACMECacheDir     string // where account keys and certificates are kept
	ACMEEmail        string // optional contact for expiry notices
	ACMEDirectoryURL string // default: Let's Encrypt's production directory

	// HTTPSHost is the host[:port] redirects point to; "" takes the
	// request's host name with HTTPSPort.
	HTTPSHost string
	// HTTPSPort is the port of the HTTPS listener, left out of redirects
	// when it is 443.
	HTTPSPort string

	Log *slog.Logger
}

// Setup is TLS ready to serve.
type Setup struct {
	// TLS is the HTTPS listener's configuration.
	TLS *tls.Config
	// HTTP answers the plain-HTTP listener: ACME challenges when ACME is
	// on, and a redirect to HTTPS for everything else.
	HTTP http.Handler

	files *FileCert // nil with ACME
}

// New checks cfg and loads what it names: a certificate pair that does not
// load, or an ACME cache directory that cannot be created, is an error
// here rather than at the first handshake.
func New(cfg Config) (*Setup, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	redirect := Redirect(cfg.HTTPSHost, cfg.HTTPSPort)
	switch {
	case cfg.CertFile != "" && len(cfg.ACMEDomains) > 0:
		return nil, errors.New("certificate files and ACME domains are exclusive")
	case cfg.CertFile != "":
		fc, err := NewFileCert(cfg.CertFile, cfg.KeyFile, cfg.Log)
		if err != nil {
			return nil, err
		}
		tc := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: fc.GetCertificate}
		return &Setup{TLS: tc, HTTP: redirect, files: fc}, nil
	case len(cfg.ACMEDomains) > 0:
		if err := os.MkdirAll(cfg.ACMECacheDir, 0o700); err != nil {
			return nil, fmt.Errorf("ACME cache: %w", err)
		}
		dir := cfg.ACMEDirectoryURL
		if dir == "" {
			dir = autocert.DefaultACMEDirectory
		}
		m := &autocert.Manager{
			Prompt:     autocert.AcceptTOS,
			Cache:      autocert.DirCache(cfg.ACMECacheDir),
			HostPolicy: autocert.HostWhitelist(cfg.ACMEDomains...),
			Email:      cfg.ACMEEmail,
			Client:     &acme.Client{DirectoryURL: dir},
		}
		tc := m.TLSConfig() // also answers TLS-ALPN-01 challenges on the HTTPS port
		tc.MinVersion = tls.VersionTLS12
		return &Setup{TLS: tc, HTTP: m.HTTPHandler(redirect)}, nil
	}
	return nil, errors.New("neither certificate files nor ACME domains")
}

// Reload reads the certificate files again (on SIGHUP); with ACME it does
// nothing, the manager renews on its own.
func (s *Setup) Reload() error {
	if s.files == nil {
		return nil
	}
	return s.files.Reload()
}

// Redirect answers every plain-HTTP request with a 308 to the same path
// and query over HTTPS, at httpsHost if set, else at the request's host
// name on httpsPort.
func Redirect(httpsHost, httpsPort string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := httpsHost
		if host == "" {
			host = r.Host
			if h, _, err := net.SplitHostPort(r.Host); err == nil {
				host = h
			}
			host = strings.Trim(host, "[]")
			if host == "" {
				http.Error(w, "use https", http.StatusBadRequest)
				return
			}
			if httpsPort != "" && httpsPort != "443" {
				host = net.JoinHostPort(host, httpsPort)
			} else if strings.Contains(host, ":") {
				host = "[" + host + "]"
			}
		}
		http.Redirect(w, r, "https://"+host+r.URL.RequestURI(), http.StatusPermanentRedirect)
	})
}

// hstsValue asks browsers to use HTTPS only for a year. Subdomains are
// left alone: the relay's domain may share them with other services.
const hstsValue = "max-age=31536000"

// HSTS adds Strict-Transport-Security to every answer of h.
func HSTS(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Strict-Transport-Security", hstsValue)
		h.ServeHTTP(w, r)
	})
}

// FileCert is a certificate and key read from files, read again when
// either file changes (checked at each handshake: a stat of each) and on
// Reload. A pair that does not load — say the certificate is renewed and
// the key not yet — is logged and the previous one kept.
type FileCert struct {
	certFile, keyFile string
	log               *slog.Logger

	mu     sync.Mutex
	cert   *tls.Certificate
	loaded [2]os.FileInfo // the files as they were when last read
}

// NewFileCert loads the pair once; it must load.
func NewFileCert(certFile, keyFile string, log *slog.Logger) (*FileCert, error) {
	fc := &FileCert{certFile: certFile, keyFile: keyFile, log: log}
	if err := fc.Reload(); err != nil {
		return nil, err
	}
	return fc, nil
}

// Reload reads the pair now; on failure the previous pair is kept.
func (fc *FileCert) Reload() error {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	st, err := fc.stat()
	if err != nil {
		return err
	}
	return fc.load(st)
}

func (fc *FileCert) stat() ([2]os.FileInfo, error) {
	var st [2]os.FileInfo
	for i, name := range []string{fc.certFile, fc.keyFile} {
		fi, err := os.Stat(name)
		if err != nil {
			return st, fmt.Errorf("TLS certificate: %w", err)
		}
		st[i] = fi
	}
	return st, nil
}

// load reads the pair; the caller holds mu. The files' state is recorded
// even when they do not load, so a bad pair is tried once, not at every
// handshake, and again as soon as either file changes.
func (fc *FileCert) load(st [2]os.FileInfo) error {
	fc.loaded = st
	cert, err := tls.LoadX509KeyPair(fc.certFile, fc.keyFile)
	if err != nil {
		return fmt.Errorf("TLS certificate %s, key %s: %w", fc.certFile, fc.keyFile, err)
	}
	fc.cert = &cert
	return nil
}

func changed(a, b os.FileInfo) bool {
	return a == nil || !os.SameFile(a, b) || !a.ModTime().Equal(b.ModTime()) || a.Size() != b.Size()
}

// GetCertificate is tls.Config's: the current pair, read again first if a
// file changed.
func (fc *FileCert) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	st, err := fc.stat()
	if err == nil && (changed(fc.loaded[0], st[0]) || changed(fc.loaded[1], st[1])) {
		if err := fc.load(st); err != nil {
			fc.log.Warn("TLS certificate not reloaded: the previous one is kept", "err", err)
		} else {
			fc.log.Info("TLS certificate reloaded", "cert", fc.certFile, "not_after", fc.cert.Leaf.NotAfter)
		}
	}
	return fc.cert, nil
}

// CheckPair says whether a certificate and key load, for the check of
// settings at start.
func CheckPair(certFile, keyFile string) error {
	_, err := tls.LoadX509KeyPair(certFile, keyFile)
	return err
}
