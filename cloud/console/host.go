package console

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/server"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/verify"
	"github.com/relaykit/relay/shared"
)

type hostData struct {
	Host     *store.Host
	Claimed  bool
	Presence store.Presence
	Counts   map[store.Status]int
	Statuses []store.Status
	Sources  []shared.Source
	// Reported says whether the host has told the cloud its configuration
	// (its subscription); Mismatches are where that and the cloud's
	// sources differ, as `host run --check` warns of them.
	Reported   bool
	Mismatches []shared.SourceMismatch
	// RatePerMin and RateBurst are the limits intake applies: the host's
	// own, the cloud's default for each that is 0.
	RatePerMin, RateBurst int
	History               []*store.PresenceEvent
	Alerts                []*store.Alert // firing alerts about this host
	Groups                []store.GroupMemberOf
	Providers             []string
	// Form is the add-source form's values after a refused attempt.
	Form sourceForm
}

type sourceForm struct {
	Name, Provider, Events string
}

// historyShown bounds the presence history on a host's page.
const historyShown = 20

func (cn *Console) hostPage(c *gin.Context) {
	cn.renderHost(c, 200, "", sourceForm{})
}

// renderHost renders a host's page; flash, when given, says what went
// wrong with the form the page answers (status is the error's).
func (cn *Console) renderHost(c *gin.Context, status int, flash string, form sourceForm) {
	h, counts, ok := cn.hostCounted(c)
	if !ok {
		return
	}
	ctx := c.Request.Context()
	srcs, err := cn.d.Store.SourceList(ctx, h.ID)
	if err != nil {
		cn.fail(c, err)
		return
	}
	history, err := cn.d.Store.PresenceEventList(ctx, h.ID, historyShown)
	if err != nil {
		cn.fail(c, err)
		return
	}
	groups, err := cn.d.Store.GroupsOfHost(ctx, h.ID)
	if err != nil {
		cn.fail(c, err)
		return
	}
	firing, err := cn.d.Store.AlertList(ctx, &store.AlertListParams{Firing: true, Limit: 100})
	if err != nil {
		cn.fail(c, err)
		return
	}
	d := hostData{Host: h, Groups: groups, Claimed: h.CredentialHash != nil, Presence: cn.d.App.Presence(h), Counts: counts,
		Statuses: store.Statuses, History: history, Providers: verify.Names(), Form: form}
	for _, s := range srcs {
		d.Sources = append(d.Sources, cn.d.App.SourceView(c, s))
	}
	d.RatePerMin, d.RateBurst = cn.d.App.HostRate(h)
	if len(h.Subscription) > 0 {
		var sub shared.Subscription
		if json.Unmarshal(h.Subscription, &sub) == nil {
			d.Reported = true
			reaching, err := server.HostSourcesFor(ctx, cn.d.Store, h.ID, srcs)
			if err != nil {
				cn.fail(c, err)
				return
			}
			d.Mismatches = shared.CompareSources(&sub, reaching)
		}
	}
	for _, a := range firing {
		if a.HostID == h.ID {
			d.Alerts = append(d.Alerts, a)
		}
	}
	p := &page{Title: h.Name, Nav: "hosts", Data: d, Alerts: firing}
	if flash != "" {
		p.Flash, p.FlashErr = flash, true
	}
	cn.render(c, status, "host", p)
}

// formFail answers a refused form on the host's page, with what was
// wrong and the status the API would answer.
func (cn *Console) formFail(c *gin.Context, err error, form sourceForm) {
	code, msg := server.Describe(err)
	if shared.HTTPStatus(code) >= 500 {
		cn.fail(c, err)
		return
	}
	cn.renderHost(c, shared.HTTPStatus(code), msg, form)
}

// back redirects to the host's page with a fixed message (flashes).
func back(c *gin.Context, msg, anchor string) {
	to := Path + "/hosts/" + c.Param("id") + "?m=" + msg
	if anchor != "" {
		to += "#" + anchor
	}
	c.Redirect(303, to)
}

// formInt reads a whole number from a form field; "" is 0.
func formInt(c *gin.Context, field string) *int {
	v := strings.TrimSpace(c.Request.PostForm.Get(field))
	if v == "" {
		v = "0"
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		n = -1 // refused by UpdateHost's own bounds, with its message
	}
	return &n
}

func (cn *Console) setLimits(c *gin.Context) {
	perMin, burst := formInt(c, "rate_limit_per_min"), formInt(c, "rate_limit_burst")
	_, err := cn.d.App.UpdateHost(c.Request.Context(), &store.HostUpdateParams{HostID: c.Param("id"), RateLimitPerMin: perMin, RateLimitBurst: burst})
	if err != nil {
		cn.formFail(c, err, sourceForm{})
		return
	}
	back(c, "limits-saved", "limits")
}

// events reads an event filter as typed: names separated by commas, spaces
// or lines; none is every event.
func events(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\r' || r == '\t' })
}

func (cn *Console) addSource(c *gin.Context) {
	f := c.Request.PostForm
	form := sourceForm{Name: strings.TrimSpace(f.Get("name")), Provider: f.Get("provider"), Events: f.Get("events")}
	secret := f.Get("secret")
	req := &server.SourceRequest{Provider: form.Provider, Events: events(form.Events)}
	if secret != "" {
		req.Secrets = []string{secret}
	}
	if _, err := cn.d.Store.SourceGet(c.Request.Context(), c.Param("id"), form.Name); err == nil {
		// Adding never replaces: a source's settings change in its own forms.
		cn.renderHost(c, 409, "A source named “"+form.Name+"” exists already: change it below.", form)
		return
	}
	if _, _, err := cn.d.App.PutSource(c.Request.Context(), c.Param("id"), form.Name, req); err != nil {
		cn.formFail(c, err, form)
		return
	}
	back(c, "source-saved", "source-"+form.Name)
}

// changeSource applies ch to the source the path names and goes back to it
// on its host's page, saying msg.
func (cn *Console) changeSource(c *gin.Context, ch *server.SourceChange, msg string) {
	if _, err := cn.d.App.ChangeSource(c.Request.Context(), c.Param("id"), c.Param("source"), ch); err != nil {
		cn.formFail(c, err, sourceForm{})
		return
	}
	back(c, msg, "source-"+c.Param("source"))
}

// formList is the list a form field types as the event filter is; none is
// an empty list.
func formList(c *gin.Context, field string) []string {
	if l := events(c.Request.PostForm.Get(field)); l != nil {
		return l
	}
	return []string{}
}

func (cn *Console) setEnabled(c *gin.Context) {
	on := c.Request.PostForm.Get("enabled") == "true"
	msg := "source-disabled"
	if on {
		msg = "source-enabled"
	}
	cn.changeSource(c, &server.SourceChange{Enabled: &on}, msg)
}

func (cn *Console) setEvents(c *gin.Context) {
	ev := formList(c, "events")
	cn.changeSource(c, &server.SourceChange{Events: &ev}, "events-saved")
}

// setAllowedIPs sets the addresses a source takes webhooks from, typed as
// the event filter is; none is any address.
func (cn *Console) setAllowedIPs(c *gin.Context) {
	ips := formList(c, "allowed_ips")
	cn.changeSource(c, &server.SourceChange{AllowedIPs: &ips}, "ips-saved")
}

func (cn *Console) rotateSecret(c *gin.Context) {
	f := c.Request.PostForm
	secret := f.Get("secret")
	if secret == "" {
		cn.renderHost(c, 400, "Give the new secret to rotate to.", sourceForm{})
		return
	}
	cn.changeSource(c, &server.SourceChange{NewSecret: secret, KeepSecrets: f.Get("keep") == "on"}, "secret-rotated")
}

type deactivateData struct {
	Host *store.Host
}

// deactivatePage asks to confirm deactivating a host.
func (cn *Console) deactivatePage(c *gin.Context) {
	h, ok := cn.hostOf(c)
	if !ok {
		return
	}
	cn.render(c, 200, "deactivate", &page{Title: "Deactivate " + h.Name, Nav: "hosts", Data: deactivateData{Host: h}})
}

func (cn *Console) deactivate(c *gin.Context) {
	if c.Request.PostForm.Get("confirm") != "yes" {
		c.Redirect(303, Path+"/hosts/"+c.Param("id")+"/deactivate")
		return
	}
	if _, err := cn.d.App.DeactivateHost(c.Request.Context(), c.Param("id")); err != nil {
		cn.fail(c, err)
		return
	}
	back(c, "deactivated", "")
}

type alertsData struct {
	Firing, Recent []*store.Alert
	Now            time.Time
}

func (cn *Console) alertsPage(c *gin.Context) {
	ctx := c.Request.Context()
	firing, err := cn.d.Store.AlertList(ctx, &store.AlertListParams{Firing: true, Limit: 100})
	if err != nil {
		cn.fail(c, err)
		return
	}
	recent, err := cn.d.Store.AlertList(ctx, &store.AlertListParams{Limit: 50})
	if err != nil {
		cn.fail(c, err)
		return
	}
	var resolved []*store.Alert
	for _, a := range recent {
		if a.ResolvedAt != nil {
			resolved = append(resolved, a)
		}
	}
	cn.render(c, 200, "alerts", &page{Title: "Alerts", Nav: "alerts", Alerts: firing,
		Data: alertsData{Firing: firing, Recent: resolved, Now: cn.now()}})
}
