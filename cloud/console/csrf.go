package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/url"
	"strings"

	"github.com/gin-gonic/gin"
)

// CSRFField is the hidden form field that carries the CSRF token.
const CSRFField = "csrf"

// csrfToken is the session's CSRF token: an HMAC of its id, so only the
// session's holder has it, every replica computes it and nothing is stored.
func (cn *Console) csrfToken(id []byte) string {
	m := hmac.New(sha256.New, cn.d.CSRFKey)
	m.Write([]byte("relay console csrf\x00"))
	m.Write(id)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// sameOrigin refuses (403) a request the browser says comes from another
// site: Sec-Fetch-Site cross-site or same-site, or an Origin whose host is
// not the one asked. Requests without either header (not from a browser,
// or an old one) pass: the CSRF token still guards them.
func (cn *Console) sameOrigin(c *gin.Context) {
	if !sameOrigin(c) {
		cn.forbidden(c, "This form was sent from another site, so it was refused. Open the console and send it from there.")
		return
	}
	c.Next()
}

func sameOrigin(c *gin.Context) bool {
	switch c.GetHeader("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return false
	}
	origin := c.GetHeader("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || origin == "null" {
		return false
	}
	return strings.EqualFold(u.Host, c.Request.Host)
}

// checkCSRF refuses (403) a state change from another site or without the
// session's CSRF token, compared in constant time.
func (cn *Console) checkCSRF(c *gin.Context) {
	if !sameOrigin(c) {
		cn.forbidden(c, "This form was sent from another site, so it was refused. Open the console and send it from there.")
		return
	}
	if !cn.parseForm(c) {
		return
	}
	got := c.Request.PostForm.Get(CSRFField)
	if got == "" || !hmac.Equal([]byte(got), []byte(sessionOf(c).csrf)) {
		cn.forbidden(c, "This form's security token is missing or out of date (the session may have changed). Reload the page and try again.")
		return
	}
	c.Next()
}
