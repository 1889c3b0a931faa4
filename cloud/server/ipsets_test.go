package server

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
)

// postFrom sends a signed GitHub webhook to the handler itself, from the
// TCP peer given, with X-Forwarded-For when xff is not "": what reached
// the body is counted.
func postFrom(b *edgeBundle, hostID, source, peer, xff string) (*httptest.ResponseRecorder, int64) {
	b.t.Helper()
	body := &countingBody{r: bytes.NewReader(prBody)}
	req := httptest.NewRequest("POST", "/api/webhooks/"+hostID+"/"+source, body)
	req.ContentLength = int64(len(prBody))
	for k, v := range ghHeaders(testSecret, "d-"+peer+xff+source+time.Now().String(), prBody) {
		req.Header.Set(k, v)
	}
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	req.RemoteAddr = peer + ":40000"
	w := httptest.NewRecorder()
	b.srv.Handler().ServeHTTP(w, req)
	return w, body.n.Load()
}

type countingBody struct {
	r *bytes.Reader
	n atomic.Int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func errCodeOf(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	return answer{status: w.Code, body: w.Body.Bytes()}.errCode(t)
}

// Behind a trusted proxy, X-Forwarded-For's address is the one checked: a
// source that allows it takes the webhook, one that does not answers 403
// unread, audited with the address and counted.
func TestIPAllowlistThroughTrustedProxy(t *testing.T) {
	b := newEdge(t, openStore(t), ringOf(t, 1), newClock(), Config{TrustedProxies: []string{"127.0.0.1"}})
	hostID, _ := b.newHost("h")
	b.addSource(hostID, "github", map[string]any{"secrets": []string{testSecret}, "allowed_ips": []string{"203.0.113.0/24"}})
	b.addSource(hostID, "strict", map[string]any{"provider": "github", "secrets": []string{testSecret}, "allowed_ips": []string{"198.51.100.0/24"}})

	w, _ := postFrom(b, hostID, "github", "127.0.0.1", "203.0.113.7")
	require.Equal(t, 200, w.Code, w.Body.String())

	w, read := postFrom(b, hostID, "strict", "127.0.0.1", "203.0.113.7")
	require.Equal(t, 403, w.Code, w.Body.String())
	require.Equal(t, shared.CodeForbidden, errCodeOf(t, w))
	require.Equal(t, "close", w.Header().Get("Connection"))
	require.Zero(t, read, "the body is not read")
	require.Equal(t, 1, b.count(hostID), "nothing stored")

	rej := b.rejections(hostID)
	require.Len(t, rej, 1)
	require.Equal(t, 403, rej[0].Status)
	require.Equal(t, "strict", rej[0].Source)
	require.Equal(t, "203.0.113.7", rej[0].ClientIP)
	require.Contains(t, rej[0].Reason, "203.0.113.7")

	m := b.admin("GET", "/metrics", nil)
	require.Contains(t, string(m.body), `relay_intake_requests_total{outcome="ip_not_allowed",provider="github"} 1`)

	// A proxy not trusted cannot name the client: its own address is
	// checked.
	w, _ = postFrom(b, hostID, "github", "192.0.2.9", "203.0.113.7")
	require.Equal(t, 403, w.Code, w.Body.String())
	require.Equal(t, "192.0.2.9", b.rejections(hostID)[0].ClientIP)
}

// Without trusted proxies X-Forwarded-For is ignored: the TCP peer is
// what is checked.
func TestIPAllowlistPeerWithoutTrustedProxy(t *testing.T) {
	b := newEdge(t, openStore(t), ringOf(t, 1), newClock(), Config{})
	hostID, _ := b.newHost("h")
	b.addSource(hostID, "github", map[string]any{"secrets": []string{testSecret}, "allowed_ips": []string{"203.0.113.0/24"}})

	w, read := postFrom(b, hostID, "github", "127.0.0.1", "203.0.113.7")
	require.Equal(t, 403, w.Code, w.Body.String())
	require.Zero(t, read)
	require.Equal(t, "127.0.0.1", b.rejections(hostID)[0].ClientIP)

	// A change applies at once (the cached target is dropped).
	a := b.admin("PATCH", "/api/hosts/"+hostID+"/sources/github", map[string]any{"allowed_ips": []string{"203.0.113.0/24", "127.0.0.1"}})
	require.Equal(t, 200, a.status, string(a.body))
	var src shared.Source
	a.json(t, &src)
	require.Equal(t, []string{"203.0.113.0/24", "127.0.0.1/32"}, src.AllowedIPs)
	w, _ = postFrom(b, hostID, "github", "127.0.0.1", "")
	require.Equal(t, 200, w.Code, w.Body.String())

	// Empty: any address again.
	a = b.admin("PATCH", "/api/hosts/"+hostID+"/sources/github", map[string]any{"allowed_ips": []string{}})
	require.Equal(t, 200, a.status, string(a.body))
	a.json(t, &src)
	require.Equal(t, []string{}, src.AllowedIPs)
	w, _ = postFrom(b, hostID, "github", "192.0.2.1", "")
	require.Equal(t, 200, w.Code, w.Body.String())
}

// A refused request costs the host no token of its rate limit.
func TestIPAllowlistBeforeRateLimit(t *testing.T) {
	b := newEdge(t, openStore(t), ringOf(t, 1), newClock(), Config{RateLimitPerMin: 60, RateLimitBurst: 1})
	hostID, _ := b.newHost("h")
	b.addSource(hostID, "github", map[string]any{"secrets": []string{testSecret}, "allowed_ips": []string{"127.0.0.1"}})
	for range 5 {
		w, _ := postFrom(b, hostID, "github", "192.0.2.1", "")
		require.Equal(t, 403, w.Code)
	}
	w, _ := postFrom(b, hostID, "github", "127.0.0.1", "")
	require.Equal(t, 200, w.Code, "the refused requests took no token: %s", w.Body.String())
}

func errMessage(t *testing.T, a answer) string {
	t.Helper()
	var e shared.ErrorResponse
	a.json(t, &e)
	return e.Error.Message
}

func TestIPAllowlistBadEntries(t *testing.T) {
	b := newEdge(t, openStore(t), ringOf(t, 1), newClock(), Config{})
	hostID, _ := b.newHost("h")
	for entry, want := range map[string]string{
		"example.com":    `"example.com"`,
		"203.0.113.0/33": `"203.0.113.0/33"`,
		"slack":          `"slack"`,
		"github":         `IP set "github" holds no address yet`,
	} {
		a := b.admin("PUT", "/api/hosts/"+hostID+"/sources/github", map[string]any{"secrets": []string{testSecret}, "allowed_ips": []string{"192.0.2.1", entry}})
		require.Equal(t, 400, a.status, entry)
		require.Contains(t, errMessage(t, a), want, entry)
		a = b.admin("PATCH", "/api/hosts/"+hostID+"/sources/github", map[string]any{"allowed_ips": []string{entry}})
		require.Equal(t, 400, a.status, entry)
		require.Contains(t, errMessage(t, a), want, entry)
	}
	// Stripe's set ships with the build.
	a := b.admin("PUT", "/api/hosts/"+hostID+"/sources/stripe", map[string]any{"secrets": []string{"whsec_x"}, "allowed_ips": []string{"stripe"}})
	require.Equal(t, 201, a.status, string(a.body))
	var src shared.Source
	a.json(t, &src)
	require.Equal(t, []string{"stripe"}, src.AllowedIPs)
}

func ipSets(t *testing.T, b *edgeBundle) map[string]shared.IPSet {
	t.Helper()
	a := b.admin("GET", "/api/ipsets", nil)
	require.Equal(t, 200, a.status, string(a.body))
	var out struct {
		Sets []shared.IPSet `json:"ip_sets"`
	}
	a.json(t, &out)
	m := map[string]shared.IPSet{}
	for _, s := range out.Sets {
		m[s.Name] = s
	}
	return m
}

// An operator's refresh of a named set takes effect at once; one that
// does not parse keeps the last good set and says why.
func TestIPSetRefreshFromFile(t *testing.T) {
	b := newEdge(t, openStore(t), ringOf(t, 1), newClock(), Config{})
	hostID, _ := b.newHost("h")

	sets := ipSets(t, b)
	require.Zero(t, sets["github"].Size)
	require.Equal(t, "shipped", sets["stripe"].Origin)
	require.Equal(t, 15, sets["stripe"].Size)
	require.Equal(t, "shipped", sets["telegram"].Origin)
	require.Equal(t, []string{"149.154.160.0/20", "91.108.4.0/22"}, sets["telegram"].Prefixes, "as Telegram's webhook guide names them")

	a := b.admin("PUT", "/api/ipsets/github", map[string]any{"data": `{"hooks": ["127.0.0.0/8", "2001:db8::/32"], "web": ["192.0.2.0/24"]}`})
	require.Equal(t, 200, a.status, string(a.body))
	var set shared.IPSet
	a.json(t, &set)
	require.Equal(t, []string{"127.0.0.0/8", "2001:db8::/32"}, set.Prefixes)
	require.Equal(t, "file", set.Origin)

	b.addSource(hostID, "github", map[string]any{"secrets": []string{testSecret}, "allowed_ips": []string{"github"}})
	w, _ := postFrom(b, hostID, "github", "127.0.0.1", "")
	require.Equal(t, 200, w.Code, w.Body.String())

	// Refreshed: the cached target goes at once.
	a = b.admin("PUT", "/api/ipsets/github", map[string]any{"data": "198.51.100.0/24\n"})
	require.Equal(t, 200, a.status, string(a.body))
	w, _ = postFrom(b, hostID, "github", "127.0.0.1", "")
	require.Equal(t, 403, w.Code, w.Body.String())

	// Empty or unparsable: 400, the last good set stays, the error shows.
	for _, bad := range []string{"", "# nothing\n", `{"hooks": []}`, "<html>", "198.51.100.0/24\nnope\n"} {
		a = b.admin("PUT", "/api/ipsets/github", map[string]any{"data": bad})
		require.Equal(t, 400, a.status, bad)
	}
	sets = ipSets(t, b)
	require.Equal(t, []string{"198.51.100.0/24"}, sets["github"].Prefixes)
	require.Contains(t, sets["github"].LastError, "not a CIDR")
	require.Equal(t, 404, b.admin("PUT", "/api/ipsets/slack", map[string]any{"data": "192.0.2.1"}).status)
}

// The scheduled refresh reads each set from its URL (here a fake
// publisher on loopback); a publisher that fails leaves the last good set
// in force and its error visible.
func TestIPSetScheduledRefresh(t *testing.T) {
	var github, stripe atomic.Value
	github.Store(`{"hooks": ["203.0.113.0/24"]}`)
	stripe.Store("")
	pub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := github
		switch r.URL.Path {
		case "/stripe":
			v = stripe
		case "/telegram":
			// Telegram's list of its networks: one a line, IPv6 too.
			_, _ = w.Write([]byte("91.108.4.0/22\n149.154.160.0/20\n2001:b28:f23d::/48\n"))
			return
		}
		body := v.Load().(string)
		if body == "" {
			http.Error(w, "down", 502)
			return
		}
		_, _ = w.Write([]byte(body))
	}))
	defer pub.Close()
	clock := newClock()
	b := newEdge(t, openStore(t), ringOf(t, 1), clock, Config{IPSetRefresh: time.Hour, TrustedProxies: []string{"127.0.0.1"},
		IPSetURLs: map[string]string{"github": pub.URL + "/meta", "stripe": pub.URL + "/stripe", "telegram": pub.URL + "/telegram"}})
	refreshed := make(chan struct{}, 1)
	b.srv.ipSetsRefreshed = func() { refreshed <- struct{}{} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.srv.RunIPSetRefresh(ctx) }()
	defer func() { cancel(); <-done }()
	<-refreshed

	sets := ipSets(t, b)
	require.Equal(t, []string{"203.0.113.0/24"}, sets["github"].Prefixes)
	require.Equal(t, pub.URL+"/meta", sets["github"].Origin)
	require.Equal(t, pub.URL+"/meta", sets["github"].URL)
	require.Empty(t, sets["github"].LastError)
	require.Equal(t, "shipped", sets["stripe"].Origin, "a failed refresh keeps the shipped list")
	require.Contains(t, sets["stripe"].LastError, "502")
	require.Equal(t, []string{"91.108.4.0/22", "149.154.160.0/20", "2001:b28:f23d::/48"}, sets["telegram"].Prefixes)

	hostID, _ := b.newHost("h")
	b.addSource(hostID, "github", map[string]any{"secrets": []string{testSecret}, "allowed_ips": []string{"github"}})
	w, _ := postFrom(b, hostID, "github", "127.0.0.1", "203.0.113.7")
	require.Equal(t, 200, w.Code, w.Body.String())

	// The next refresh moves the set; the one after fails and keeps it.
	github.Store("198.51.100.0/24\n")
	clock.Advance(time.Hour)
	<-refreshed
	w, _ = postFrom(b, hostID, "github", "127.0.0.1", "203.0.113.7")
	require.Equal(t, 403, w.Code, w.Body.String())
	github.Store("")
	clock.Advance(time.Hour)
	<-refreshed
	sets = ipSets(t, b)
	require.Equal(t, []string{"198.51.100.0/24"}, sets["github"].Prefixes, "the last good set stays")
	require.True(t, strings.Contains(sets["github"].LastError, "502"), sets["github"].LastError)
	require.Equal(t, clock.Now().UTC(), sets["github"].CheckedAt.UTC())
	w, _ = postFrom(b, hostID, "github", "127.0.0.1", "198.51.100.9")
	require.Equal(t, 200, w.Code, w.Body.String())
}
