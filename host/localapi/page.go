package localapi

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/relaykit/relay/host/agent"
	"github.com/relaykit/relay/host/ledger"
	"github.com/relaykit/relay/shared"
)

// The host page: server-rendered HTML over the same ledger and agent state
// the JSON API reads. It changes nothing (GET only, no forms), carries no
// authentication and is protected as the rest of the local API is: the
// loopback listener and the Host check (hostAllowed). Everything a handler
// or a payload produced is untrusted and goes through html/template's
// escaping; the Content-Security-Policy allows no inline script or style.

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

// pageCSP allows the page's own stylesheet and script and nothing else.
const pageCSP = "default-src 'none'; style-src 'self'; img-src 'self' data:; script-src 'self'; " +
	"form-action 'none'; frame-ancestors 'none'; base-uri 'none'"

// Page sizes.
const (
	overviewRecent = 20 // deliveries on the overview
	overviewErrors = 5  // failures on the overview
	outputPreview  = 2000
)

var pageTemplates = template.Must(template.New("").Funcs(template.FuncMap{
	"when":   fmtTime,
	"ago":    ago,
	"dur":    fmtDuration,
	"ms":     func(ms int64) string { return fmtDuration(time.Duration(ms) * time.Millisecond) },
	"label":  resultLabel,
	"skew":   fmtSkew,
	"sorted": sortedFields,
}).ParseFS(templateFS, "templates/*.html"))

// pageView is what every page's template gets.
type pageView struct {
	Title    string
	Nav      string // overview, deliveries, errors
	Self     string // this page's URL, for the Refresh link
	Now      time.Time
	HostID   string
	CloudURL string
	Status   string // ok or degraded, as /healthz says
}

type overviewView struct {
	pageView
	Agent      agent.Status
	Outbox     int
	Recent     []row
	MoreRecent bool
	Errors     []row
	MoreErrors bool
}

type listView struct {
	pageView
	Entries []row
	Result  string
	Source  string
	Limit   int
	Newest  string // the first page with the same filters ("" on it)
	Older   string // the next page ("" on the last)
	Filters []filterLink
}

// row is a ledger row as the lists show it, formatted once here: each
// template action costs a reflective call, and a list shows up to 500 rows.
type row struct {
	ledger.Entry
	When, Event, Label, Took, Detail string
	// Link is the summary's link (an https pull request address), Thread
	// the Slack thread it belongs to; Preview the end of the output.
	Link, Thread, Preview string
	Runs                  int // runs on this host, when more than one
	// Again says whether a failed run is tried again (again).
	Again string
}

func rows(es []ledger.Entry) []row {
	out := make([]row, len(es))
	for i, e := range es {
		r := row{Entry: e, When: fmtTime(e.ProcessedAt), Event: event(e.EventType, e.EventAction),
			Label: resultLabel(e.Result), Took: fmtDuration(time.Duration(e.DurationMS) * time.Millisecond),
			Detail: "/delivery?id=" + url.QueryEscape(e.DeliveryID), Preview: preview(e.Output), Again: again(e)}
		if e.Summary != "" {
			r.Link, r.Thread = safeLink(e.Fields["github.url"]), e.Fields["slack.thread_ts"]
		}
		if e.Attempts > 1 {
			r.Runs = e.Attempts
		}
		out[i] = r
	}
	return out
}

// again says whether a failed run is tried again, as the host's nack asked
// the cloud; "" when the ledger does not know (a success, a skip, an
// error recorded before it kept this).
func again(e ledger.Entry) string {
	switch {
	case e.Result != ledger.ResultError || e.Retryable == nil:
		return ""
	case *e.Retryable:
		return fmt.Sprintf("Runs again: the cloud hands it out again after its retry delay, unless attempt %d was its last (then it is dead-lettered; `cloud ctl inspect %s` tells which).", e.CloudAttempt, e.DeliveryID)
	}
	return fmt.Sprintf("Does not run again: this failure is not retried (the handler's retry_4xx or retry_nonzero_exit), so the cloud dead-letters it. Once the cause is fixed, `cloud ctl deliveries retry %s` sends it again.", e.DeliveryID)
}

func event(typ, action string) string {
	if action == "" {
		return typ
	}
	return typ + "." + action
}

type filterLink struct {
	Label, Href string
	On          bool
}

type detailView struct {
	pageView
	E       ledger.Entry
	Row     row
	Running *agent.RunningWebhook // the delivery runs again now
}

type errorView struct {
	pageView
	Message string
}

func (s *Server) routePages() {
	s.mux.HandleFunc("GET /{$}", s.pageOverview)
	s.mux.HandleFunc("GET /deliveries", s.pageList)
	s.mux.HandleFunc("GET /errors", s.pageList)
	s.mux.HandleFunc("GET /delivery", s.pageDetail)
	assets, _ := fs.Sub(assetFS, "assets")
	files := http.FileServerFS(assets)
	s.mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pageHeaders(w)
		files.ServeHTTP(w, r)
	})))
}

// SetCloudURL names the cloud the host talks to, for the page.
func (s *Server) SetCloudURL(u string) { s.cloudURL = u }

func (s *Server) view(r *http.Request, title, nav string) pageView {
	v, _ := s.viewHealth(r, title, nav)
	return v
}

// viewHealth is view with what /healthz says (the outbox read from the
// ledger once).
func (s *Server) viewHealth(r *http.Request, title, nav string) (pageView, healthResponse) {
	v := pageView{Title: title, Nav: nav, Self: r.URL.RequestURI(), Now: s.clock.Now(), CloudURL: s.cloudURL}
	h, err := s.health(r.Context())
	if err != nil {
		s.log.Error("host page: ledger unreadable", "err", err)
	}
	v.Status = h.Status
	return v, h
}

func (s *Server) pageOverview(w http.ResponseWriter, r *http.Request) {
	if len(r.URL.Query()) > 0 {
		s.pageError(w, r, shared.CodeInvalid, "the overview takes no query parameters")
		return
	}
	ctx := r.Context()
	pv, h := s.viewHealth(r, "Host", "overview")
	v := overviewView{pageView: pv, Agent: s.agent.Status(), Outbox: h.Outbox}
	v.HostID = v.Agent.HostID
	recent, next, err := s.ledger.DeliveryList(ctx, ledger.ListParams{Limit: overviewRecent})
	if err != nil {
		s.pageInternal(w, r, err)
		return
	}
	v.Recent, v.MoreRecent = rows(recent), next != ""
	failed, next, err := s.ledger.DeliveryList(ctx, ledger.ListParams{Result: ledger.ResultError, Limit: overviewErrors})
	if err != nil {
		s.pageInternal(w, r, err)
		return
	}
	v.Errors, v.MoreErrors = rows(failed), next != ""
	s.render(w, r, http.StatusOK, "overview.html", v)
}

// pageList lists deliveries (/deliveries) or failures with their output
// (/errors), newest first, with the JSON API's filters and paging.
func (s *Server) pageList(w http.ResponseWriter, r *http.Request) {
	errorsOnly := r.URL.Path == "/errors"
	p, err := s.listParams(r)
	if err != nil {
		s.pageError(w, r, shared.CodeInvalid, err.Error())
		return
	}
	v := listView{pageView: s.view(r, "Deliveries", "deliveries"), Source: p.Source, Limit: p.Limit}
	v.HostID = s.agent.Status().HostID
	if errorsOnly {
		if p.Result != "" && p.Result != ledger.ResultError {
			s.pageError(w, r, shared.CodeInvalid, "the errors page lists result=error only")
			return
		}
		p.Result = ledger.ResultError
		v.Title, v.Nav = "Errors", "errors"
	}
	v.Result = string(p.Result)
	entries, next, err := s.ledger.DeliveryList(r.Context(), p)
	if errors.Is(err, ledger.ErrInvalidCursor) {
		s.pageError(w, r, shared.CodeInvalid, "invalid cursor: follow the page's Older link")
		return
	}
	if err != nil {
		s.pageInternal(w, r, err)
		return
	}
	v.Entries = rows(entries)
	q := r.URL.Query()
	q.Del("cursor")
	if p.Cursor != "" {
		v.Newest = pageURL(r.URL.Path, q)
	}
	if next != "" {
		q.Set("cursor", next)
		v.Older = pageURL(r.URL.Path, q)
	}
	if !errorsOnly {
		for _, f := range []struct{ label, result string }{{"all", ""}, {"handled", "success"}, {"failed", "error"}, {"skipped", "skipped"}} {
			fq := r.URL.Query()
			fq.Del("cursor")
			fq.Del("result")
			if f.result != "" {
				fq.Set("result", f.result)
			}
			v.Filters = append(v.Filters, filterLink{Label: f.label, Href: pageURL(r.URL.Path, fq), On: v.Result == f.result})
		}
	}
	s.render(w, r, http.StatusOK, "list.html", v)
}

func pageURL(path string, q url.Values) string {
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

func (s *Server) pageDetail(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		if k != "id" {
			s.pageError(w, r, shared.CodeInvalid, fmt.Sprintf("unknown query parameter %q (allowed: id)", k))
			return
		}
	}
	id := q.Get("id")
	if id == "" {
		s.pageError(w, r, shared.CodeInvalid, "no delivery id given: /delivery?id=…")
		return
	}
	e, err := s.ledger.DeliveryGet(r.Context(), id)
	if errors.Is(err, ledger.ErrNotFound) {
		s.pageError(w, r, shared.CodeNotFound, fmt.Sprintf("delivery %q is not in the ledger", id))
		return
	}
	if err != nil {
		s.pageInternal(w, r, err)
		return
	}
	st := s.agent.Status()
	v := detailView{pageView: s.view(r, "Delivery", ""), E: e, Row: rows([]ledger.Entry{e})[0]}
	v.HostID = st.HostID
	for i := range st.Running {
		if st.Running[i].DeliveryID == id {
			v.Running = &st.Running[i]
		}
	}
	s.render(w, r, http.StatusOK, "detail.html", v)
}

func (s *Server) pageError(w http.ResponseWriter, r *http.Request, code, msg string) {
	v := errorView{pageView: s.view(r, "Error", ""), Message: msg}
	s.render(w, r, shared.HTTPStatus(code), "error.html", v)
}

func (s *Server) pageInternal(w http.ResponseWriter, r *http.Request, err error) {
	s.log.Error("host page", "path", r.URL.Path, "err", err)
	s.pageError(w, r, shared.CodeInternal, "internal error (see the host's log)")
}

// render executes a page into a buffer first: a template that fails
// answers 500, never half a page.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name string, v any) {
	var buf bytes.Buffer
	buf.Grow(32 << 10)
	if err := pageTemplates.ExecuteTemplate(&buf, name, v); err != nil {
		s.log.Error("host page: render", "page", name, "err", err)
		pageHeaders(w)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	pageHeaders(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// pageHeaders are the headers of every page and asset.
func pageHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
}

// Formatting helpers of the templates. Times are this host's, in UTC.

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}

func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	if d < 0 {
		return "in " + fmtDuration(-d)
	}
	return fmtDuration(d) + " ago"
}

// fmtDuration is short and rounded: 850 ms, 4.2 s, 3 min 5 s, 2 h 10 min.
func fmtDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	case d < 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min %d s", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h %d min", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%d d", int(d.Hours()/24))
}

func fmtSkew(d time.Duration) string {
	switch {
	case d == 0:
		return "in step with the cloud"
	case d > 0:
		return fmt.Sprintf("%s ahead of the cloud", fmtDuration(d))
	}
	return fmt.Sprintf("%s behind the cloud", fmtDuration(-d))
}

// resultLabel names a result as the page shows it.
func resultLabel(r ledger.Result) string {
	switch r {
	case ledger.ResultSuccess:
		return "handled"
	case ledger.ResultError:
		return "failed"
	}
	return string(r)
}

// preview is the end of a long output (where a failing program says why).
func preview(s string) string {
	if len(s) <= outputPreview {
		return s
	}
	cut := len(s) - outputPreview
	for cut < len(s) && !utf8RuneStart(s[cut]) {
		cut++
	}
	return "…" + s[cut:]
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// safeLink returns u when it is an https URL (a pull request's address from
// the payload), else "": nothing else from a payload becomes a link.
func safeLink(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Scheme != "https" || p.Host == "" || strings.ContainsAny(u, " \t\r\n") {
		return ""
	}
	return p.String()
}

type field struct{ Key, Value string }

func sortedFields(m map[string]string) []field {
	out := make([]field, 0, len(m))
	for k, v := range m {
		out = append(out, field{k, v})
	}
	slices.SortFunc(out, func(a, b field) int { return strings.Compare(a.Key, b.Key) })
	return out
}
