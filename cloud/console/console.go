// Package console is the cloud's web console: server-rendered pages on the
// cloud's main listener, under /console/, for the operator holding the
// admin token. Pages are html/template with their stylesheet and a little
// plain JavaScript embedded in the binary; every page reads without
// JavaScript. The console changes nothing by itself: it calls the same
// functions the JSON API's handlers call (cloud/server) and reads the store.
//
// Logging in with the admin token opens a session (sessions.go): a random
// id in an HttpOnly, SameSite=Strict cookie, only its HMAC under a key
// derived from the admin token stored, so that a session lives only as
// long as the token it was opened under. Every
// state change is a form POST carrying the session's CSRF token and coming
// from the console's own origin (csrf.go); every answer carries a strict
// Content-Security-Policy (headers.go).
package console

import (
	"context"
	"log/slog"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/jonboulle/clockwork"

	"github.com/relaykit/relay/cloud/server"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

// App is what the console does through the JSON API's own functions, so
// that a rule is decided in one place (cloud/server's Server).
type App interface {
	CheckAdminLogin(c *gin.Context, token string) (wait time.Duration, err error)
	CreateHost(ctx context.Context, name string) (*shared.CreateHostResponse, error)
	NewClaimCode(ctx context.Context, hostID string) (*shared.CreateHostResponse, error)
	DeactivateHost(ctx context.Context, hostID string) (*store.Host, error)
	UpdateHost(ctx context.Context, p *store.HostUpdateParams) (*store.Host, error)
	PutSource(ctx context.Context, hostID, name string, req *server.SourceRequest) (*store.Source, bool, error)
	ChangeSource(ctx context.Context, hostID, name string, ch *server.SourceChange) (*store.Source, error)
	SourceView(c *gin.Context, src *store.Source) shared.Source
	Presence(h *store.Host) store.Presence
	HostRate(h *store.Host) (perMin, burst int)
	ViaHTTPS(c *gin.Context) bool
	PublicURL(c *gin.Context) string
	// ConsoleSessionKey keys the stored session hashes: derived from the
	// admin token in force; nil without one (then no session is valid).
	ConsoleSessionKey() []byte
}

var _ App = (*server.Server)(nil)

// Deps are the console's dependencies; all but Volume are required.
type Deps struct {
	App   App
	Store Store
	Clock clockwork.Clock
	Log   *slog.Logger
	// CSRFKey keys the CSRF tokens (HMAC of the session id): the same on
	// every replica, e.g. auth.Tokens.DerivedKey("console csrf").
	CSRFKey []byte
	// SecureCookie marks the session cookie Secure: set it when the cloud
	// serves TLS or RELAY_PUBLIC_URL is https. Without it, a request that
	// a trusted proxy says came over HTTPS (App.ViaHTTPS) gets it Secure.
	SecureCookie bool
	// Volume gives the hosts' webhooks per hour over the last 24 hours,
	// oldest first, by host id (a host with none may be absent), for the
	// hosts page's sparklines of a page of hosts; nil: none drawn.
	Volume func(ctx context.Context, now time.Time, hostIDs []string) (map[string][]int, error)
	// MaxSessions is how many live sessions are kept at most, the oldest
	// removed first; 0: DefaultMaxSessions.
	MaxSessions int
}

// Session bounds.
const (
	SessionIdle        = 12 * time.Hour     // a session unused this long ends
	SessionMaxAge      = 7 * 24 * time.Hour // a session ends this long after login, used or not
	DefaultMaxSessions = 1000               // live sessions kept at most, the oldest removed first
	// touchEvery is how stale a session's last-seen time may get before a
	// request moves it (a write per request otherwise).
	touchEvery = time.Minute
)

// Console serves the console's pages.
type Console struct {
	d          Deps
	pages      *pages
	sessionKey []byte // App.ConsoleSessionKey(): the admin token is fixed while the cloud runs
}

// New returns the console.
func New(d Deps) *Console {
	if d.MaxSessions <= 0 {
		d.MaxSessions = DefaultMaxSessions
	}
	return &Console{d: d, pages: mustParsePages(), sessionKey: d.App.ConsoleSessionKey()}
}

// Path is where the console is mounted.
const Path = "/console"

// navItem is an entry of every page's navigation.
type navItem struct{ Key, Title, Href string }

// nav is the console's navigation, in order.
var nav = []navItem{
	{"hosts", "Hosts", Path + "/"},
	{"groups", "Groups", Path + "/groups"},
	{"deliveries", "Deliveries", Path + "/deliveries"},
	{"dead-letters", "Dead letters", Path + "/deliveries?status=dlq"},
	{"volume", "Volume", Path + "/volume"},
	{"rejections", "Rejections", Path + "/rejections"},
	{"alerts", "Alerts", Path + "/alerts"},
}

// Routes registers the console's routes on r: / redirects to the console.
func (cn *Console) Routes(r gin.IRouter) {
	r.GET("/", cn.headers, func(c *gin.Context) { c.Redirect(303, Path+"/") })
	g := r.Group(Path, cn.headers)
	g.GET("", func(c *gin.Context) { c.Redirect(303, Path+"/") })
	g.GET("/assets/:name", cn.asset)
	g.GET("/login", cn.loginPage)
	g.POST("/login", cn.sameOrigin, cn.login)

	a := g.Group("", cn.requireSession)
	a.POST("/logout", cn.checkCSRF, cn.logout)
	a.GET("/", cn.hostsPage)
	a.POST("/hosts", cn.checkCSRF, cn.createHost)
	a.GET("/hosts/:id", cn.hostPage)
	a.POST("/hosts/:id/claim-code", cn.checkCSRF, cn.newClaimCode)
	a.POST("/hosts/:id/limits", cn.checkCSRF, cn.setLimits)
	a.GET("/hosts/:id/deactivate", cn.deactivatePage)
	a.POST("/hosts/:id/deactivate", cn.checkCSRF, cn.deactivate)
	a.POST("/hosts/:id/sources", cn.checkCSRF, cn.addSource)
	a.POST("/hosts/:id/sources/:source/enabled", cn.checkCSRF, cn.setEnabled)
	a.POST("/hosts/:id/sources/:source/events", cn.checkCSRF, cn.setEvents)
	a.POST("/hosts/:id/sources/:source/allowed-ips", cn.checkCSRF, cn.setAllowedIPs)
	a.POST("/hosts/:id/sources/:source/secret", cn.checkCSRF, cn.rotateSecret)
	a.GET("/groups", cn.groupsPage)
	a.GET("/groups/:id", cn.groupPage)
	a.GET("/alerts", cn.alertsPage)
	cn.deliveryRoutes(a) // deliveries.go
}

// now is the console's clock, truncated to the milliseconds stores keep.
func (cn *Console) now() time.Time { return cn.d.Clock.Now().UTC().Truncate(time.Millisecond) }
