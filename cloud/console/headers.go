package console

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"mime"
	"net/http"
	"path"
	"sync"

	"github.com/gin-gonic/gin"
)

// CSP is every console answer's Content-Security-Policy: the console's own
// scripts, styles and images only (no inline ones), no framing, forms
// posted to itself only.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// headers sets the security headers on every console answer, and keeps
// pages out of caches (assets set their own Cache-Control).
func (cn *Console) headers(c *gin.Context) {
	setHeaders(c.Writer.Header())
	c.Next()
}

func setHeaders(h http.Header) {
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
}

//go:embed assets
var assetFS embed.FS

// asset is one embedded file with its content hash.
type asset struct {
	body  []byte
	ctype string
	hash  string // hex SHA-256, first 16 characters
}

// assets are the embedded files, read on first use: not when `cloud ctl`
// starts (the MIME types' first look-up reads the system's tables).
var assets = sync.OnceValue(loadAssets)

func loadAssets() map[string]*asset {
	entries, err := assetFS.ReadDir("assets")
	if err != nil {
		panic("console: " + err.Error())
	}
	out := map[string]*asset{}
	for _, e := range entries {
		b, err := assetFS.ReadFile("assets/" + e.Name())
		if err != nil {
			panic("console: " + err.Error())
		}
		sum := sha256.Sum256(b)
		ctype := mime.TypeByExtension(path.Ext(e.Name()))
		if ctype == "" {
			ctype = "application/octet-stream"
		}
		out[e.Name()] = &asset{body: b, ctype: ctype, hash: hex.EncodeToString(sum[:])[:16]}
	}
	return out
}

// assetURL is an asset's URL with its content hash, so that it can be
// cached for good: a new build changes the URL.
func assetURL(name string) string {
	a, ok := assets()[name]
	if !ok {
		panic("console: no asset " + name)
	}
	return Path + "/assets/" + name + "?v=" + a.hash
}

// asset serves an embedded asset: cached for a year when asked by its
// hashed URL, else revalidated by its ETag.
func (cn *Console) asset(c *gin.Context) {
	a, ok := assets()[c.Param("name")]
	if !ok {
		c.Header("Content-Type", "text/plain; charset=utf-8")
		c.String(404, "no such asset")
		return
	}
	etag := `"` + a.hash + `"`
	c.Header("ETag", etag)
	if c.Query("v") == a.hash {
		c.Header("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		c.Header("Cache-Control", "no-cache")
	}
	if c.GetHeader("If-None-Match") == etag {
		c.Status(304)
		return
	}
	c.Data(200, a.ctype, a.body)
}
