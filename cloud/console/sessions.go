package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/server"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

// CookieName is the session cookie's name.
const CookieName = "relay_session"

// session is the logged-in session of a request.
type session struct {
	id   []byte // the random id, as the cookie holds it (decoded)
	hash []byte // its keyed hash, as stored (sessionHash)
	csrf string // its CSRF token
}

const sessionKey = "console.session"

func sessionOf(c *gin.Context) *session {
	if v, ok := c.Get(sessionKey); ok {
		return v.(*session)
	}
	return nil
}

// newSessionID is 32 random bytes.
func newSessionID() []byte {
	id := make([]byte, 32)
	_, _ = rand.Read(id) // never fails (crypto/rand)
	return id
}

// errNoAdminToken: without an admin token there are no sessions.
var errNoAdminToken = errors.New("console sessions need an admin token: set RELAY_ADMIN_TOKEN")

// sessionHash is what the store knows a session by: an HMAC-SHA256 of
// its id under the key derived from the admin token in force
// (App.ConsoleSessionKey). Under another token the same cookie hashes to
// a row that does not exist, so rotating the token ends every session on
// every replica; nil when there is no token.
func (cn *Console) sessionHash(id []byte) []byte {
	if len(cn.sessionKey) == 0 {
		return nil
	}
	m := hmac.New(sha256.New, cn.sessionKey)
	m.Write([]byte("relay console session\x00"))
	m.Write(id)
	return m.Sum(nil)
}

// cookieSession decodes the session cookie: nil when absent or malformed.
func cookieSession(r *http.Request) []byte {
	ck, err := r.Cookie(CookieName)
	if err != nil {
		return nil
	}
	id, err := base64.RawURLEncoding.DecodeString(ck.Value)
	if err != nil || len(id) != 32 {
		return nil
	}
	return id
}

// StartSession stores a new session as of now and returns its id. The
// oldest sessions beyond Deps.MaxSessions go, as do ended ones. Without
// an admin token it stores nothing and fails.
func (cn *Console) StartSession(ctx context.Context) ([]byte, *store.Session, error) {
	id := newSessionID()
	h := cn.sessionHash(id)
	if h == nil {
		return nil, nil, errNoAdminToken
	}
	now := cn.now()
	s, err := cn.d.Store.SessionCreate(ctx, &store.SessionCreateParams{
		IDHash: h, Now: now, ExpiresAt: now.Add(SessionMaxAge),
		IdleBefore: now.Add(-SessionIdle), Max: cn.d.MaxSessions,
	})
	if err != nil {
		return nil, nil, err
	}
	return id, s, nil
}

// LookupSession finds the live session with the id: ErrNotFound when
// there is none, it ended (idle too long, or too old), it was opened
// under another admin token or there is no admin token now; a session
// whose last-seen time is stale moves it to now.
func (cn *Console) LookupSession(ctx context.Context, id []byte) (*store.Session, error) {
	h := cn.sessionHash(id)
	if h == nil {
		return nil, fmt.Errorf("no admin token: %w", store.ErrNotFound)
	}
	s, err := cn.d.Store.SessionGet(ctx, h)
	if err != nil {
		return nil, err
	}
	now := cn.now()
	if !now.Before(s.ExpiresAt) || !s.LastSeenAt.After(now.Add(-SessionIdle)) {
		// Ended: deleted now rather than left for the next login's sweep.
		_ = cn.d.Store.SessionDelete(ctx, h)
		return nil, fmt.Errorf("session ended: %w", store.ErrNotFound)
	}
	if now.Sub(s.LastSeenAt) >= touchEvery {
		if err := cn.d.Store.SessionTouch(ctx, h, now); err != nil {
			return nil, err
		}
		s.LastSeenAt = now
	}
	return s, nil
}

// requireSession lets a request with a live session through; others are
// sent to the login page (a GET remembering where it was going).
func (cn *Console) requireSession(c *gin.Context) {
	id := cookieSession(c.Request)
	if id != nil {
		_, err := cn.LookupSession(c.Request.Context(), id)
		switch {
		case err == nil:
			c.Set(sessionKey, &session{id: id, hash: cn.sessionHash(id), csrf: cn.csrfToken(id)})
			c.Next()
			return
		case !errors.Is(err, store.ErrNotFound):
			cn.fail(c, err)
			return
		}
	}
	to := Path + "/login"
	if c.Request.Method == http.MethodGet {
		to += "?next=" + url.QueryEscape(c.Request.URL.RequestURI())
	}
	c.Redirect(303, to)
	c.Abort()
}

func (cn *Console) setCookie(c *gin.Context, value string, expires time.Time, maxAge int) {
	http.SetCookie(c.Writer, &http.Cookie{
		Name: CookieName, Value: value, Path: Path,
		Expires: expires, MaxAge: maxAge,
		HttpOnly: true, Secure: cn.d.SecureCookie || cn.d.App.ViaHTTPS(c), SameSite: http.SameSiteStrictMode,
	})
}

// nextPath is where to go after logging in: a console path only (never
// another site, nor a path the browser would read as one).
func nextPath(next string) string {
	if strings.HasPrefix(next, Path+"/") && !strings.HasPrefix(next, "//") && !strings.ContainsAny(next, "\\\r\n") {
		return next
	}
	return Path + "/"
}

type loginData struct {
	Next  string
	Error string
}

func (cn *Console) loginPage(c *gin.Context) {
	// Already logged in: on to the console.
	if id := cookieSession(c.Request); id != nil {
		if _, err := cn.LookupSession(c.Request.Context(), id); err == nil {
			c.Redirect(303, nextPath(c.Query("next")))
			return
		}
	}
	cn.render(c, 200, "login", &page{Title: "Log in", Data: loginData{Next: nextPath(c.Query("next"))}})
}

// maxFormBytes bounds a form's body.
const maxFormBytes = 64 << 10

func (cn *Console) login(c *gin.Context) {
	if !cn.parseForm(c) {
		return
	}
	next := nextPath(c.Request.PostForm.Get("next"))
	wait, err := cn.d.App.CheckAdminLogin(c, c.Request.PostForm.Get("token"))
	if err != nil {
		code, msg := server.Describe(err)
		if code == shared.CodeRateLimited {
			c.Header("Retry-After", fmt.Sprint(int((wait+time.Second-1)/time.Second)))
		}
		cn.render(c, shared.HTTPStatus(code), "login", &page{Title: "Log in", Data: loginData{Next: next, Error: msg}})
		return
	}
	// A login replaces the session the browser held, if any.
	if old := cookieSession(c.Request); old != nil {
		if err := cn.d.Store.SessionDelete(c.Request.Context(), cn.sessionHash(old)); err != nil {
			cn.fail(c, err)
			return
		}
	}
	id, s, err := cn.StartSession(c.Request.Context())
	if err != nil {
		cn.fail(c, err)
		return
	}
	cn.setCookie(c, base64.RawURLEncoding.EncodeToString(id), s.ExpiresAt, int(SessionMaxAge/time.Second))
	cn.d.Log.Info("console login", "client", c.ClientIP())
	c.Redirect(303, next)
}

func (cn *Console) logout(c *gin.Context) {
	if err := cn.d.Store.SessionDelete(c.Request.Context(), sessionOf(c).hash); err != nil {
		cn.fail(c, err)
		return
	}
	cn.setCookie(c, "", time.Unix(0, 0), -1)
	c.Redirect(303, Path+"/login?m=logged-out")
}

// parseForm reads a POST's urlencoded form, at most maxFormBytes; false
// when it answered an error.
func (cn *Console) parseForm(c *gin.Context) bool {
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, maxFormBytes)
	if err := c.Request.ParseForm(); err != nil {
		cn.failCode(c, shared.CodeInvalid, "the form could not be read (at most 64 KiB)")
		return false
	}
	return true
}
