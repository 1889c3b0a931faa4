package console

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/server"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

//go:embed templates
var templateFS embed.FS

// page is what every page's template gets: the layout's fields, and the
// page's own in Data.
type page struct {
	Title    string
	Nav      string // the navigation entry the page is under
	Flash    string // a message about what was just done
	FlashErr bool   // Flash says something failed
	CSRF     string // the session's CSRF token, for forms ({{template "csrf" .}})
	LoggedIn bool
	Now      time.Time      // when the page was rendered (the console's clock)
	Alerts   []*store.Alert // firing alerts, for the banner
	Data     any

	NavItems []navItem
	CSS, JS  string // the assets' URLs
}

// pages holds each page's template: the layout with the page's file.
type pages struct {
	byName map[string]*template.Template
}

// funcs are the helpers templates may call.
var funcs = template.FuncMap{
	"when": func(t any) string {
		switch v := t.(type) {
		case time.Time:
			return v.UTC().Format("2006-01-02 15:04:05 UTC")
		case *time.Time:
			if v == nil {
				return "—"
			}
			return v.UTC().Format("2006-01-02 15:04:05 UTC")
		}
		return ""
	},
	"iso":   func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"deref": func(t *time.Time) time.Time { return *t },
	"dur":   humanDuration,
	"join":  strings.Join,
	"bytes": humanBytes,
	// ago is how long before now t was: "3m ago".
	"ago": func(now time.Time, t *time.Time) string {
		if t == nil {
			return ""
		}
		return humanDuration(now.Sub(*t)) + " ago"
	},
}

// mustParsePages parses layout.html with each other template file, the page
// named after its file.
func mustParsePages() *pages {
	layout := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html"))
	files, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		panic("console: " + err.Error())
	}
	p := &pages{byName: map[string]*template.Template{}}
	for _, f := range files {
		name := strings.TrimSuffix(strings.TrimPrefix(f, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		t := template.Must(template.Must(layout.Clone()).ParseFS(templateFS, f))
		p.byName[name] = t
	}
	return p
}

// flashes are the messages a redirect may ask for with ?m=: fixed texts,
// so that no one can make the console say anything else.
var flashes = map[string]string{
	"logged-out":      "You are logged out.",
	"limits-saved":    "Rate limits saved.",
	"source-saved":    "Source saved.",
	"source-enabled":  "Source enabled.",
	"source-disabled": "Source disabled: its webhooks are refused until it is enabled again.",
	"events-saved":    "Event filter saved.",
	"ips-saved":       "Allowed addresses saved.",
	"secret-rotated":  "Secret rotated: the fingerprint below is the new secret's.",
	"deactivated":     "Host deactivated: its tokens are revoked and its webhooks refused.",
}

// render writes a page: the named template with the layout, status, and
// the session's CSRF token and firing alerts filled in. The page is
// rendered whole before anything is written, so that a template error is
// a clean 500.
func (cn *Console) render(c *gin.Context, status int, name string, p *page) {
	t, ok := cn.pages.byName[name]
	if !ok {
		cn.d.Log.Error("console: no such page template", "page", name)
		c.String(500, "internal error")
		return
	}
	p.NavItems, p.CSS, p.JS, p.Now = nav, assetURL("console.css"), assetURL("console.js"), cn.now()
	if s := sessionOf(c); s != nil {
		p.LoggedIn, p.CSRF = true, s.csrf
		if p.Alerts == nil {
			alerts, err := cn.d.Store.AlertList(c.Request.Context(), &store.AlertListParams{Firing: true, Limit: 100})
			if err != nil {
				cn.d.Log.Warn("console: firing alerts unavailable", "err", err)
			}
			p.Alerts = alerts
		}
	}
	if p.Flash == "" {
		if m, ok := flashes[c.Query("m")]; ok {
			p.Flash = m
		}
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", p); err != nil {
		cn.d.Log.Error("console: render", "page", name, "err", err)
		c.Header("Content-Type", "text/plain; charset=utf-8")
		c.String(500, "internal error")
		return
	}
	c.Data(status, "text/html; charset=utf-8", buf.Bytes())
}

// fail answers an error as a page: its message and the status the API
// would answer (server.Describe, shared.HTTPStatus); internal errors are
// logged and not detailed.
func (cn *Console) fail(c *gin.Context, err error) {
	code, msg := server.Describe(err)
	if shared.HTTPStatus(code) >= 500 {
		if errors.Is(err, c.Request.Context().Err()) && c.Request.Context().Err() != nil {
			c.Abort()
			return
		}
		cn.d.Log.LogAttrs(c.Request.Context(), slog.LevelError, "console request failed",
			slog.String("method", c.Request.Method), slog.String("route", c.FullPath()), slog.Any("err", err))
	}
	cn.failCode(c, code, msg)
}

// failCode answers a page saying what went wrong, with the code's status.
func (cn *Console) failCode(c *gin.Context, code, msg string) {
	status := shared.HTTPStatus(code)
	cn.render(c, status, "error", &page{Title: fmt.Sprintf("Error %d", status), Data: errorData{Status: status, Message: msg}})
	c.Abort()
}

type errorData struct {
	Status  int
	Message string
}

// NotFound answers a path under the console that names no page: an HTML
// page under the console's headers, not the API's JSON.
func (cn *Console) NotFound(c *gin.Context) {
	setHeaders(c.Writer.Header())
	cn.failCode(c, shared.CodeNotFound, "There is no such page.")
}

// forbidden answers 403 with a page saying why.
func (cn *Console) forbidden(c *gin.Context, msg string) {
	cn.render(c, 403, "error", &page{Title: "Refused", Data: errorData{Status: 403, Message: msg}})
	c.Abort()
}

// humanBytes is n bytes for people: 512 bytes, 64 KiB, 25 MiB.
func humanBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// humanDuration is d rounded for people: 45s, 12m, 3h 5m, 2d 4h.
func humanDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
	}
}

// hostOf reads the host the route's :id names, or answers its page (404
// when there is none) and returns false.
func (cn *Console) hostOf(c *gin.Context) (*store.Host, bool) {
	h, err := cn.d.Store.HostGet(c.Request.Context(), c.Param("id"))
	if errors.Is(err, store.ErrNotFound) {
		cn.failCode(c, shared.CodeNotFound, "No such host.")
		return nil, false
	}
	if err != nil {
		cn.fail(c, err)
		return nil, false
	}
	return h, true
}

// hostCounted is hostOf with the host's deliveries counted by status; it
// answers the request itself when either fails.
func (cn *Console) hostCounted(c *gin.Context) (*store.Host, map[store.Status]int, bool) {
	h, ok := cn.hostOf(c)
	if !ok {
		return nil, nil, false
	}
	counts, err := cn.d.Store.DeliveryCountByStatus(c.Request.Context(), h.ID)
	if err != nil {
		cn.fail(c, err)
		return nil, nil, false
	}
	return h, counts, true
}
