package alert

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/relaykit/relay/cloud/secrets"
	"github.com/relaykit/relay/cloud/store"
)

// Store is what the evaluator reads and writes (a store.Store has it);
// errors are the database's.
type Store interface {
	HostNames(ctx context.Context, ids []string) (map[string]string, error)
	QuarantineCount(ctx context.Context) (int, error)
	LeaseAcquire(ctx context.Context, p *store.LeaseAcquireParams) (bool, error)
	PresenceChanges(ctx context.Context, p *store.PresenceChangesParams) ([]*store.PresenceChange, error)
	PresenceSet(ctx context.Context, p *store.PresenceSetParams) ([]bool, error)
	PresenceList(ctx context.Context, p *store.PresenceListParams) ([]*store.PresenceChange, error)
	PresenceCounts(ctx context.Context) (map[store.Presence]int, error)
	BacklogByHost(ctx context.Context, p *store.BacklogParams) ([]*store.HostBacklog, error)
	FailingSources(ctx context.Context, p *store.FailingSourcesParams) ([]*store.SourceFailures, error)
	AlertFire(ctx context.Context, ps []*store.AlertFireParams) ([]*store.Alert, error)
	AlertRemind(ctx context.Context, ps []*store.AlertNoticeParams) ([]bool, error)
	AlertResolve(ctx context.Context, ps []*store.AlertNoticeParams) ([]bool, error)
	AlertList(ctx context.Context, p *store.AlertListParams) ([]*store.Alert, error)
	AlertRuleList(ctx context.Context) ([]*store.AlertRuleSetting, error)
	AlertOutboxDue(ctx context.Context, p *store.AlertOutboxDueParams) ([]*store.AlertNotification, error)
	AlertOutboxSent(ctx context.Context, p *store.AlertOutboxSentParams) error
	AlertOutboxFailed(ctx context.Context, p *store.AlertOutboxFailedParams) error
	Intake5xxAdd(ctx context.Context, p *store.Intake5xxAddParams) error
	Intake5xxSum(ctx context.Context, p *store.Intake5xxSumParams) (int64, error)
	GroupList(ctx context.Context) ([]*store.Group, error)
	DeliveryGroupWaiting(ctx context.Context, groupID string, except []string, limit int) ([]store.Waiting, error)
}

// MaxHosts bounds what one evaluation reads of hosts: the presence changes
// applied, the offline hosts and the hosts with a backlog it looks at (the
// oldest backlogs first), and so the per-host metric series.
const MaxHosts = 1000

// maxFiring bounds the firing alerts one evaluation compares.
const maxFiring = 10000

// leaseName is the evaluator's lease among replicas.
const leaseName = "alert-evaluator"

// intake5xxKeep is how long the replicas' intake 5xx counts are kept.
const intake5xxKeep = time.Hour

// Config sets the evaluator. Zero values take the defaults.
type Config struct {
	Interval  time.Duration // between evaluations (default 15 s)
	Resend    time.Duration // a firing alert is sent again this often (default 1 h)
	Presence  PresenceConfig
	PublicURL string // base of the links in notifications
	Holder    string // this replica's name in the evaluator's lease (default random)
	// KeysOK, when set, says whether a configured key opens the stored
	// secrets' canary (RuleSecretKeys).
	KeysOK func(ctx context.Context) (bool, error)
	// Intake5xx, when set, is how many intake requests this replica has
	// answered with a 5xx so far: each interval, every replica adds what
	// it counted since to its count in the store, which RuleIntake5xx
	// sums over every replica.
	Intake5xx func() uint64
	// SinkAllow lists the networks sinks may reach although they are
	// loopback, link-local, private, unspecified or multicast (see
	// refusedNets); none by default.
	SinkAllow []netip.Prefix
}

func (c *Config) setDefaults() {
	if c.Interval <= 0 {
		c.Interval = 15 * time.Second
	}
	if c.Resend <= 0 {
		c.Resend = time.Hour
	}
	c.Presence.setDefaults()
	c.PublicURL = strings.TrimRight(c.PublicURL, "/")
	if c.Holder == "" {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		c.Holder = hex.EncodeToString(b)
	}
}

// Evaluator evaluates the rules and sends notifications, on the replica
// that holds its lease.
type Evaluator struct {
	store   Store
	ring    *secrets.Ring
	cfg     Config
	clock   clockwork.Clock
	log     *slog.Logger
	metrics *Metrics
	client  *http.Client // sends notifications (see sinkClient)

	mu         sync.Mutex
	nextEval   time.Time
	leaseUntil time.Time
	last5xx    uint64 // Intake5xx when last read
	unwritten  uint64 // 5xx read from Intake5xx and not yet added to the store
}

// New returns an evaluator; ring opens the sinks' URLs and secrets.
func New(st Store, ring *secrets.Ring, cfg Config, clock clockwork.Clock, log *slog.Logger) *Evaluator {
	cfg.setDefaults()
	e := &Evaluator{store: st, ring: ring, cfg: cfg, clock: clock, log: log, metrics: newMetrics(),
		client: sinkClient(cfg.SinkAllow)}
	if cfg.Intake5xx != nil {
		e.last5xx = cfg.Intake5xx()
	}
	return e
}

// Presence is the evaluator's presence rule.
func (e *Evaluator) Presence() PresenceConfig { return e.cfg.Presence }

// Metrics are the evaluator's Prometheus collectors.
func (e *Evaluator) Metrics() *Metrics { return e.metrics }

func (e *Evaluator) now() time.Time { return e.clock.Now().UTC().Truncate(time.Millisecond) }

// Run ticks every second until ctx ends: an evaluation each interval,
// sending in between (see Tick). When ctx ends, it writes what this
// replica's intake answered with 5xx since the last write.
func (e *Evaluator) Run(ctx context.Context) {
	t := e.clock.NewTicker(time.Second)
	defer t.Stop()
	for {
		e.Tick(ctx)
		select {
		case <-ctx.Done():
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			e.mu.Lock()
			defer e.mu.Unlock()
			e.write5xx(wctx, e.now())
			return
		case <-t.Chan():
		}
	}
}

// write5xx adds to this replica's count in the store the 5xx its intake
// answered since the last write. What it cannot write (the store is down,
// which is what makes the intake answer 5xx) is kept and written with the
// next, and this replica's evaluations count it meanwhile.
func (e *Evaluator) write5xx(ctx context.Context, now time.Time) {
	if e.cfg.Intake5xx == nil {
		return
	}
	cur := e.cfg.Intake5xx()
	e.unwritten += cur - e.last5xx
	e.last5xx = cur
	if e.unwritten == 0 {
		return
	}
	err := e.store.Intake5xxAdd(ctx, &store.Intake5xxAddParams{Replica: e.cfg.Holder, N: int64(e.unwritten), Now: now,
		PruneBefore: now.Add(-intake5xxKeep)})
	if err != nil {
		e.log.Warn("alert: intake 5xx count", "unwritten", e.unwritten, "err", err)
		return
	}
	e.unwritten = 0
}

// window5xx is how far back RuleIntake5xx counts: the minutes of every
// replica's counts from the one a minute (or an interval, if longer) ago.
func (e *Evaluator) window5xx(now time.Time) time.Time {
	return store.MinuteOf(now.Add(-max(e.cfg.Interval, time.Minute)))
}

// Tick runs what is due: when an interval has passed, it takes (or renews)
// the evaluator's lease and, holding it, evaluates the rules; while it
// holds the lease, it sends what the outbox has due.
func (e *Evaluator) Tick(ctx context.Context) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	if !now.Before(e.nextEval) {
		e.nextEval = now.Add(e.cfg.Interval)
		e.write5xx(ctx, now)
		until := now.Add(2 * e.cfg.Interval)
		held, err := e.store.LeaseAcquire(ctx, &store.LeaseAcquireParams{Name: leaseName, Holder: e.cfg.Holder, Until: until, Now: now})
		switch {
		case err != nil:
			e.log.Warn("alert evaluator: lease", "err", err)
			e.metrics.evalErrors.Inc()
		case held:
			e.leaseUntil = until
			if err := e.evaluate(ctx, now); err != nil {
				e.log.Warn("alert evaluation", "err", err)
				e.metrics.evalErrors.Inc()
			}
		default:
			e.leaseUntil = time.Time{}
			e.metrics.reset()
		}
	}
	if now.Before(e.leaseUntil) {
		e.metrics.evaluator.Set(1)
		if err := e.send(ctx); err != nil {
			e.log.Warn("alert notifications", "err", err)
		}
	} else {
		e.metrics.evaluator.Set(0)
	}
}

// condition is one rule's condition holding on one key.
type condition struct {
	rule, key, hostID, source string
	what                      string // what holds, for people
	link                      string
}

func hostKey(id string) string { return "host:" + id }

// evaluate reads what the rules look at — one bounded query each — and
// applies the transitions: presence changes, alerts fired, re-sent and
// resolved.
func (e *Evaluator) evaluate(ctx context.Context, now time.Time) error {
	list, err := e.store.AlertRuleList(ctx)
	if err != nil {
		return err
	}
	sets := newSettings(list)
	if err := e.presence(ctx, now); err != nil {
		return err
	}
	conds := map[string]*condition{}
	complete := map[string]bool{}
	add := func(c *condition) { conds[c.rule+"|"+c.key] = c }

	offline, err := e.store.PresenceList(ctx, &store.PresenceListParams{State: store.PresenceOffline, Limit: MaxHosts})
	if err != nil {
		return err
	}
	offlineSince := make(map[string]time.Time, len(offline))
	for _, o := range offline {
		offlineSince[o.HostID] = *o.Since
		if thr, on := sets.of(mustRule(RuleOffline), o.HostID); on && now.Sub(*o.Since) >= store.Millis(thr) {
			add(&condition{rule: RuleOffline, key: hostKey(o.HostID), hostID: o.HostID,
				what: "offline since " + o.Since.Format(time.RFC3339) + " (" + ago(now, *o.Since) + ")", link: e.hostLink(o.HostID)})
		}
	}
	complete[RuleOffline] = len(offline) < MaxHosts
	e.metrics.observeOffline(now, offline)
	counts, err := e.store.PresenceCounts(ctx)
	if err != nil {
		return err
	}
	e.metrics.observePresence(counts)

	dlqWindow := store.Millis(sets.max(mustRule(RuleDeadLetters)))
	backlog, err := e.store.BacklogByHost(ctx, &store.BacklogParams{DLQSince: now.Add(-dlqWindow), Limit: MaxHosts})
	if err != nil {
		return err
	}
	backlogComplete := len(backlog) < MaxHosts
	complete[RuleOfflineWithWork] = backlogComplete && complete[RuleOffline]
	complete[RuleOldestPending], complete[RuleDeadLetters] = backlogComplete, backlogComplete
	for _, b := range backlog {
		if since, ok := offlineSince[b.HostID]; ok && b.Pending > 0 {
			if thr, on := sets.of(mustRule(RuleOfflineWithWork), b.HostID); on && now.Sub(since) >= store.Millis(thr) {
				add(&condition{rule: RuleOfflineWithWork, key: hostKey(b.HostID), hostID: b.HostID,
					what: fmt.Sprintf("offline since %s (%s) with %s waiting", since.Format(time.RFC3339), ago(now, since), count(b.Pending, "webhook")),
					link: e.hostLink(b.HostID) + "/webhooks"})
			}
		}
		if b.OldestPending != nil {
			if thr, on := sets.of(mustRule(RuleOldestPending), b.HostID); on && now.Sub(*b.OldestPending) >= store.Millis(thr) {
				add(&condition{rule: RuleOldestPending, key: hostKey(b.HostID), hostID: b.HostID,
					what: fmt.Sprintf("oldest of %s waiting received %s", count(b.Pending, "webhook"), ago(now, *b.OldestPending)),
					link: e.hostLink(b.HostID) + "/webhooks"})
			}
		}
		if b.NewDLQ > 0 {
			if _, on := sets.of(mustRule(RuleDeadLetters), b.HostID); on {
				add(&condition{rule: RuleDeadLetters, key: hostKey(b.HostID), hostID: b.HostID,
					what: fmt.Sprintf("%s dead-lettered %s (%d in all)", count(b.NewDLQ, "webhook"), inLast(dlqWindow), b.DLQ),
					link: e.hostLink(b.HostID) + "/webhooks?status=dlq"})
			}
		}
	}
	e.metrics.observeBacklog(now, backlog)

	if err := e.groupsOffline(ctx, now, sets, offlineSince, add); err != nil {
		return err
	}
	complete[RuleGroupOffline] = complete[RuleOffline]

	rf := mustRule(RuleRepeatedFailures)
	failing, err := e.store.FailingSources(ctx, &store.FailingSourcesParams{MinAttempts: int(sets.min(rf)), Limit: MaxHosts})
	if err != nil {
		return err
	}
	complete[RuleRepeatedFailures] = len(failing) < MaxHosts
	e.metrics.observeFailing(failing)
	for _, f := range failing {
		if thr, on := sets.of(rf, f.HostID); on && int64(f.Attempts) >= thr {
			add(&condition{rule: RuleRepeatedFailures, key: hostKey(f.HostID) + "/" + f.Source, hostID: f.HostID, source: f.Source,
				what: fmt.Sprintf("source %s: a webhook failed %s in a row (%d retrying)", f.Source, count(f.Attempts, "attempt"), f.Retrying),
				link: e.hostLink(f.HostID) + "/webhooks?status=retrying&source=" + f.Source})
		}
	}

	if _, on := sets.of(mustRule(RuleQuarantine), ""); on {
		n, err := e.store.QuarantineCount(ctx)
		if err != nil {
			return err
		}
		if n > 0 {
			add(&condition{rule: RuleQuarantine, key: "cloud", what: count(n, "intake request") + " quarantined", link: e.cfg.PublicURL + "/api/quarantine"})
		}
	}
	complete[RuleQuarantine] = true
	if _, on := sets.of(mustRule(RuleSecretKeys), ""); on && e.cfg.KeysOK != nil {
		ok, err := e.cfg.KeysOK(ctx)
		if err != nil {
			return err
		}
		if !ok {
			add(&condition{rule: RuleSecretKeys, key: "cloud", what: "no configured secret key opens the stored secrets (RELAY_SECRET_KEYS)"})
		}
	}
	complete[RuleSecretKeys] = true
	if thr, on := sets.of(mustRule(RuleIntake5xx), ""); on {
		since := e.window5xx(now)
		n, err := e.store.Intake5xxSum(ctx, &store.Intake5xxSumParams{Since: since})
		if err != nil {
			return err
		}
		n += int64(e.unwritten) // this replica's, when the store would not take them
		if n > 0 && n >= thr {
			add(&condition{rule: RuleIntake5xx, key: "cloud",
				what: fmt.Sprintf("intake answered %s with 5xx since %s, over every replica", count(n, "request"), since.Format(time.RFC3339))})
		}
	}
	complete[RuleIntake5xx] = true
	return e.transitions(ctx, now, conds, complete)
}

// presence records the hosts whose presence changed (at most MaxHosts an
// evaluation; the rest on the next).
func (e *Evaluator) presence(ctx context.Context, now time.Time) error {
	changes, err := e.store.PresenceChanges(ctx, &store.PresenceChangesParams{
		LateBefore: now.Add(-e.cfg.Presence.LateAfter), OfflineBefore: now.Add(-e.cfg.Presence.OfflineAfter), Limit: MaxHosts})
	if err != nil {
		return err
	}
	var moves []store.PresenceMove
	var was []*store.PresenceChange
	for _, c := range changes {
		if to := e.cfg.Presence.Of(c.LastContact, c.ClaimedAt, now); to != c.State {
			moves = append(moves, store.PresenceMove{HostID: c.HostID, From: c.State, To: to})
			was = append(was, c)
		}
	}
	if len(moves) == 0 {
		return nil
	}
	made, err := e.store.PresenceSet(ctx, &store.PresenceSetParams{Changes: moves, Now: now})
	if err != nil {
		return err
	}
	for i, m := range moves {
		if made[i] && m.From != "" {
			attrs := []any{"host", m.HostID, "from", m.From, "to", m.To}
			if was[i].Since != nil {
				attrs = append(attrs, "lasted", now.Sub(*was[i].Since).Round(time.Second))
			}
			e.log.Info("host presence changed", attrs...)
		}
	}
	return nil
}

// transitions fires what holds and is not firing, re-sends what fires
// past the resend cadence, and resolves what no longer holds — except for
// rules whose bounded query did not see everything.
func (e *Evaluator) transitions(ctx context.Context, now time.Time, conds map[string]*condition, complete map[string]bool) error {
	firing, err := e.store.AlertList(ctx, &store.AlertListParams{Firing: true, Limit: maxFiring})
	if err != nil {
		return err
	}
	byRule := map[string]int{}
	var reminders, resolutions []*store.AlertNoticeParams
	var ended []*store.Alert // the alerts of resolutions
	for _, a := range firing {
		k := a.Rule + "|" + a.Key
		c, holds := conds[k]
		switch {
		case holds:
			delete(conds, k)
			byRule[a.Rule]++
			if now.Sub(a.LastSentAt) < e.cfg.Resend {
				continue
			}
			p, err := e.payload("alert.reminder", a, c.link, now)
			if err != nil {
				return err
			}
			reminders = append(reminders, &store.AlertNoticeParams{ID: a.ID, LastSentAt: a.LastSentAt, Payload: p, Now: now})
		case complete[a.Rule]:
			resolved := *a
			resolved.ResolvedAt = &now
			p, err := e.payload("alert.resolved", &resolved, e.linkOf(a), now)
			if err != nil {
				return err
			}
			resolutions = append(resolutions, &store.AlertNoticeParams{ID: a.ID, Payload: p, Now: now})
			ended = append(ended, a)
		default:
			byRule[a.Rule]++
		}
	}
	// Each kind of notice in one call, however many alerts.
	if len(reminders) > 0 {
		if _, err := e.store.AlertRemind(ctx, reminders); err != nil {
			return err
		}
	}
	if len(resolutions) > 0 {
		done, err := e.store.AlertResolve(ctx, resolutions)
		if err != nil {
			return err
		}
		for i, a := range ended {
			if done[i] {
				e.log.Info("alert resolved", "rule", a.Rule, "key", a.Key, "lasted", now.Sub(a.StartedAt).Round(time.Second))
			}
		}
	}
	if err := e.fire(ctx, now, conds, byRule); err != nil {
		return err
	}
	e.metrics.observeFiring(byRule)
	return nil
}

// fire records the alerts of conds (none firing) in one call, each
// host's named in its summary.
func (e *Evaluator) fire(ctx context.Context, now time.Time, conds map[string]*condition, byRule map[string]int) error {
	if len(conds) == 0 {
		return nil
	}
	var hosts []string
	for _, c := range conds {
		if c.hostID != "" {
			hosts = append(hosts, c.hostID)
		}
	}
	names, err := e.store.HostNames(ctx, hosts)
	if err != nil {
		return err
	}
	ps := make([]*store.AlertFireParams, 0, len(conds))
	for _, k := range slices.Sorted(maps.Keys(conds)) {
		c := conds[k]
		summary := "Cloud: " + c.what
		if c.hostID != "" {
			name := c.hostID
			if n, ok := names[c.hostID]; ok {
				name = fmt.Sprintf("%s (%s)", n, c.hostID)
			}
			summary = "Host " + name + ": " + c.what
		}
		link := c.link
		ps = append(ps, &store.AlertFireParams{Rule: c.rule, Key: c.key, HostID: c.hostID, Source: c.source,
			Summary: summary, Now: now, Payload: func(a *store.Alert) ([]byte, error) { return e.payload("alert.firing", a, link, now) }})
	}
	fired, err := e.store.AlertFire(ctx, ps)
	if err != nil {
		return err
	}
	for i, p := range ps {
		byRule[p.Rule]++
		if a := fired[i]; a != nil {
			e.log.Warn("alert firing", "rule", a.Rule, "key", a.Key, "summary", a.Summary)
		}
	}
	return nil
}

func (e *Evaluator) hostLink(id string) string { return e.cfg.PublicURL + "/api/hosts/" + id }

func (e *Evaluator) linkOf(a *store.Alert) string {
	if a.HostID != "" {
		return e.hostLink(a.HostID)
	}
	return ""
}

func mustRule(name string) Rule {
	r, ok := RuleNamed(name)
	if !ok {
		panic("alert: no rule " + name)
	}
	return r
}

// ago says how long before now t was: "an hour ago", "5 minutes ago".
func ago(now, t time.Time) string {
	return span(now.Sub(t)) + " ago"
}

// Notification is what a sink receives: a Standard Webhooks payload
// ({"type", "timestamp", "data"}).
type Notification struct {
	Type      string    `json:"type"` // alert.firing, alert.reminder, alert.resolved
	Timestamp time.Time `json:"timestamp"`
	Data      AlertData `json:"data"`
}

// AlertData is the alert a notification is about.
type AlertData struct {
	ID         int64      `json:"id"`
	Rule       string     `json:"rule"`
	Key        string     `json:"key"`
	HostID     string     `json:"host_id,omitempty"`
	Source     string     `json:"source,omitempty"`
	Summary    string     `json:"summary"`
	StartedAt  time.Time  `json:"started_at"`
	ResolvedAt *time.Time `json:"resolved_at,omitempty"`
	Link       string     `json:"link,omitempty"`
}

func (e *Evaluator) payload(typ string, a *store.Alert, link string, now time.Time) ([]byte, error) {
	return json.Marshal(Notification{Type: typ, Timestamp: now, Data: AlertData{
		ID: a.ID, Rule: a.Rule, Key: a.Key, HostID: a.HostID, Source: a.Source, Summary: a.Summary,
		StartedAt: a.StartedAt, ResolvedAt: a.ResolvedAt, Link: link,
	}})
}

// groupsOffline observes each active group's members up and any
// deliveries waiting, and adds RuleGroupOffline's conditions: a group
// whose members are all offline (offlineSince), the last of them for at
// least the threshold, while deliveries of its any sources wait. (A
// fanout's deliveries are each a member's own: the host rules see them.)
func (e *Evaluator) groupsOffline(ctx context.Context, now time.Time, sets *settings, offlineSince map[string]time.Time,
	add func(*condition)) error {
	thr, on := sets.of(mustRule(RuleGroupOffline), "")
	groups, err := e.store.GroupList(ctx)
	if err != nil {
		return err
	}
	var series []groupSeries
	for _, g := range groups {
		if g.Status != store.HostActive {
			continue
		}
		var last time.Time
		up := 0
		for _, m := range g.Members {
			since, ok := offlineSince[m.HostID]
			if !ok {
				up++
			} else if since.After(last) {
				last = since
			}
		}
		waiting, err := e.store.DeliveryGroupWaiting(ctx, g.ID, nil, maxGroupWaiting)
		if err != nil {
			return err
		}
		series = append(series, groupSeries{id: g.ID, up: up, waiting: len(waiting)})
		if on && up == 0 && len(g.Members) > 0 && len(waiting) > 0 && now.Sub(last) >= store.Millis(thr) {
			add(&condition{rule: RuleGroupOffline, key: "group:" + g.ID,
				what: fmt.Sprintf("group %s (%s): every member offline since %s (%s) with %s waiting", g.Name, g.ID,
					last.Format(time.RFC3339), ago(now, last), count(len(waiting), "webhook")),
				link: e.cfg.PublicURL + "/api/groups/" + g.ID})
		}
	}
	e.metrics.observeGroups(series)
	return nil
}

// maxGroupWaiting bounds the waiting deliveries counted per group.
const maxGroupWaiting = 1000
