package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/intake"
	"github.com/relaykit/relay/cloud/secrets"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/verify"
	"github.com/relaykit/relay/shared"
)

// SourceRequest is PUT /api/hosts/:id/sources/:source and PUT
// /api/groups/:id/sources/:source. Secrets are write-only: omitted keeps
// the stored ones, a list replaces them.
type SourceRequest struct {
	Provider     string            `json:"provider"`
	Enabled      *bool             `json:"enabled"`
	Events       []string          `json:"events"`
	Secrets      []string          `json:"secrets"`
	Options      map[string]string `json:"options"`
	MaxBodyBytes int64             `json:"max_body_bytes"`
	// RetrySchedule is the wait in seconds before each attempt, the first
	// (made on receipt) 0; absent or empty: the default schedule.
	RetrySchedule []float64 `json:"retry_schedule_s"`
	// MaxAttempts dead-letters after that many failed attempts; absent or
	// 0: one per entry of the schedule.
	MaxAttempts int `json:"max_attempts"`
	// AllowedIPs: CIDRs, single IPs and names of IP sets the source takes
	// webhooks from; absent or empty: any address.
	AllowedIPs []string `json:"allowed_ips"`
	// Mode is a group's source's, and required there: fanout or any. A
	// host's source has none.
	Mode string `json:"mode"`
}

// sourceOwner is whose sources a request reaches: a host's, or a group's
// (whose sources have a mode). One code serves both.
type sourceOwner struct {
	id    string
	group bool
}

func hostOwner(id string) sourceOwner  { return sourceOwner{id: id} }
func groupOwner(id string) sourceOwner { return sourceOwner{id: id, group: true} }

// notFound is err, or, when the store found nothing, the owner's "no such
// host" or "no such group".
func (o sourceOwner) notFound(err error) error {
	if o.group {
		return groupErr(err)
	}
	return hostErr(err)
}

// owns reports whether src is o's kind of source: a group's has a mode, a
// host's none.
func (o sourceOwner) owns(src *store.Source) bool { return (src.Mode != "") == o.group }

// mode checks the mode a request gives a source of o's: a group's must be
// fanout or any, a host's has none ("").
func (o sourceOwner) mode(m string) (store.GroupMode, error) {
	if !o.group {
		if m != "" {
			return "", errHostMode
		}
		return "", nil
	}
	if !store.GroupMode(m).Valid() {
		return "", shared.Invalid(`mode must be "fanout" or "any"`)
	}
	return store.GroupMode(m), nil
}

var errHostMode = shared.Invalid("mode is a group's source's setting: a host's source has none")

// checkOwner finds o in the store: a host's id is no group, a group's no
// host.
func (s *Server) checkOwner(ctx context.Context, o sourceOwner) error {
	var err error
	if o.group {
		_, err = s.store.GroupGet(ctx, o.id)
	} else {
		_, err = s.store.HostGet(ctx, o.id)
	}
	return o.notFound(err)
}

// Bounds of a source's retry schedule.
const (
	maxScheduleEntries = 20
	maxScheduleDelay   = 7 * 24 * time.Hour
	maxSourceAttempts  = 50
)

// retrySchedule validates a source's retry settings and returns them as
// stored (nil delays: the default policy).
func retrySchedule(req *SourceRequest) ([]time.Duration, int, error) {
	if len(req.RetrySchedule) > maxScheduleEntries {
		return nil, 0, shared.Invalid(fmt.Sprintf("retry_schedule_s has %d entries; at most %d", len(req.RetrySchedule), maxScheduleEntries))
	}
	var delays []time.Duration
	for i, sec := range req.RetrySchedule {
		// Checked before it becomes a Duration, which 1e10 s would
		// overflow (to a negative delay) and 1e308 s turn into 0.
		if !(sec >= 0 && sec <= maxScheduleDelay.Seconds()) {
			return nil, 0, shared.Invalid(fmt.Sprintf("retry_schedule_s[%d] must be from 0 to %d seconds", i, int(maxScheduleDelay.Seconds())))
		}
		ms := sec * 1000
		if math.Abs(ms-math.Round(ms)) > 1e-6 {
			return nil, 0, shared.Invalid(fmt.Sprintf("retry_schedule_s[%d]: %g is finer than the millisecond a delay is kept to", i, sec))
		}
		d := time.Duration(math.Round(ms)) * time.Millisecond
		switch {
		case i == 0 && d != 0:
			return nil, 0, shared.Invalid("retry_schedule_s[0] is the first attempt, made on receipt: it must be 0")
		}
		delays = append(delays, d)
	}
	if req.MaxAttempts != 0 && (req.MaxAttempts < 1 || req.MaxAttempts > maxSourceAttempts) {
		return nil, 0, shared.Invalid(fmt.Sprintf("max_attempts must be from 1 to %d (absent: one per entry of retry_schedule_s)", maxSourceAttempts))
	}
	return delays, req.MaxAttempts, nil
}

// SourceView is a source as the admin API shows it: secrets as their
// keyed fingerprints only.
func (s *Server) SourceView(c *gin.Context, src *store.Source) shared.Source {
	fps := make([]string, 0, len(src.Secrets))
	for _, sec := range src.Secrets {
		fps = append(fps, s.shownFingerprint(src, sec))
	}
	events := src.Events
	if events == nil {
		events = []string{}
	}
	opts := src.Options
	if opts == nil {
		opts = map[string]string{}
	}
	allowed := src.AllowedIPs
	if allowed == nil {
		allowed = []string{}
	}
	limit := src.MaxBodyBytes
	if p, ok := verify.Lookup(src.Provider); ok {
		limit = bodyLimit(src, p)
	}
	return shared.Source{
		Name: src.Name, Provider: src.Provider, Enabled: src.Enabled, Events: events,
		SecretFingerprints: fps, Options: opts, MaxBodyBytes: limit,
		RetrySchedule: scheduleSeconds(delivery.PolicyFor(src.RetryDelays, s.deliveries.Policy()).Delays),
		MaxAttempts:   store.MaxAttemptsFor(src.MaxAttempts, src.RetryDelays),
		AllowedIPs:    allowed,
		Mode:          string(src.Mode),
		WebhookURL:    s.publicURL(c) + "/api/webhooks/" + src.HostID + "/" + src.Name,
		CreatedAt:     src.CreatedAt, UpdatedAt: src.UpdatedAt,
	}
}

// scheduleSeconds is a retry schedule in seconds, as the API shows it.
func scheduleSeconds(delays []time.Duration) []float64 {
	out := make([]float64, len(delays))
	for i, d := range delays {
		out[i] = d.Seconds()
	}
	return out
}

// fingerprintKey keys the fingerprints of source secrets (see
// secrets.Fingerprint). It is derived from the JWT key, which every replica
// holds, rather than from the secret key ring, whose first key changes at
// each rotation: a secret keeps its fingerprint across key rotations.
func (s *Server) fingerprintKey() []byte { return s.tokens.DerivedKey("secret fingerprints") }

// shownFingerprint is a secret's fingerprint as the API and the console
// show it: the stored one, unless it was stored unkeyed (before
// fingerprints were keyed), which is never shown: the keyed fingerprint is
// made from the secret instead, or, when no configured key opens it, the
// key it is sealed with is named.
func (s *Server) shownFingerprint(src *store.Source, sec store.SealedSecret) string {
	if !secrets.Unkeyed(sec.Fingerprint) {
		return sec.Fingerprint
	}
	pt, err := s.ring.Open(sec.Ciphertext, intake.SealContext(src.HostID, src.Name))
	if err != nil {
		return "unreadable (key " + secrets.KeyID(sec.Ciphertext) + ")"
	}
	return secrets.Fingerprint(s.fingerprintKey(), pt)
}

func (s *Server) putSource(c *gin.Context)      { s.putSourceOf(c, hostOwner(c.Param("id"))) }
func (s *Server) putGroupSource(c *gin.Context) { s.putSourceOf(c, groupOwner(c.Param("id"))) }

func (s *Server) putSourceOf(c *gin.Context, o sourceOwner) {
	var req SourceRequest
	if !shared.ValidSourceName(c.Param("source")) {
		s.writeError(c, errBadSourceName)
		return
	}
	if err := decodeJSON(c, 256<<10, &req); err != nil {
		s.writeError(c, err)
		return
	}
	src, created, err := s.upsertSource(c.Request.Context(), o, c.Param("source"), &req)
	if err != nil {
		s.writeError(c, err)
		return
	}
	status := 200
	if created {
		status = 201
	}
	c.JSON(status, s.SourceView(c, src))
}

var errBadSourceName = shared.Invalid("source name must be " + shared.SourceNameRule)

// PutSource creates or replaces a host's source as PUT
// /api/hosts/:id/sources/:source does, and says whether it created it.
// Errors are the API's (see Describe).
func (s *Server) PutSource(ctx context.Context, hostID, name string, req *SourceRequest) (*store.Source, bool, error) {
	return s.upsertSource(ctx, hostOwner(hostID), name, req)
}

// upsertSource creates or replaces a source of o's, and says whether it
// created it.
func (s *Server) upsertSource(ctx context.Context, o sourceOwner, name string, req *SourceRequest) (*store.Source, bool, error) {
	if !shared.ValidSourceName(name) {
		return nil, false, errBadSourceName
	}
	if req.Provider == "" {
		req.Provider = name
	}
	p, ok := verify.Lookup(req.Provider)
	if !ok {
		return nil, false, shared.Invalid(fmt.Sprintf("unknown provider %q; known: %v", req.Provider, verify.Names()))
	}
	if err := checkEvents(req.Events); err != nil {
		return nil, false, err
	}
	if oc, ok := p.(verify.OptionsChecker); ok {
		if err := oc.CheckOptions(req.Options); err != nil {
			return nil, false, shared.Invalid("options: " + err.Error())
		}
	}
	delays, maxAttempts, err := retrySchedule(req)
	if err != nil {
		return nil, false, err
	}
	if req.MaxBodyBytes < 0 || req.MaxBodyBytes > 100<<20 {
		return nil, false, shared.Invalid("max_body_bytes must be between 0 (provider default) and 104857600")
	}
	mode, err := o.mode(req.Mode)
	if err != nil {
		return nil, false, err
	}
	allowed, err := s.checkAllowedIPs(ctx, req.AllowedIPs)
	if err != nil {
		return nil, false, err
	}

	if err := s.checkOwner(ctx, o); err != nil {
		return nil, false, err
	}
	existing, err := s.store.SourceGet(ctx, o.id, name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		existing = nil
	case err != nil:
		return nil, false, err
	}
	var sealed []store.SealedSecret
	switch {
	case req.Secrets != nil:
		if sealed, err = s.sealSecrets(p, o.id, name, req.Secrets); err != nil {
			return nil, false, err
		}
	case existing != nil:
		sealed = existing.Secrets
	}
	if len(sealed) == 0 {
		return nil, false, shared.Invalid("secrets: at least one secret is required")
	}
	enabled := true
	if req.Enabled != nil {
		enabled = *req.Enabled
	}
	src, err := s.store.SourceUpsert(ctx, &store.SourceUpsertParams{
		HostID: o.id, Name: name, Provider: p.Name(), Enabled: enabled, Events: req.Events,
		Secrets: sealed, Options: req.Options, MaxBodyBytes: req.MaxBodyBytes, AllowedIPs: allowed,
		RetryDelays: delays, MaxAttempts: maxAttempts, Mode: mode, Now: s.now(),
	})
	s.intake.Forget(o.id)
	if err != nil {
		return nil, false, o.notFound(err)
	}
	return src, existing == nil, nil
}

// maxSecrets bounds a source's secrets active at once.
const maxSecrets = 10

// sealSecrets checks a source's secrets against its provider and seals
// them, bound to the source's owner (a host or a group) and name.
func (s *Server) sealSecrets(p verify.Provider, ownerID, name string, secs []string) ([]store.SealedSecret, error) {
	if len(secs) > maxSecrets {
		return nil, shared.Invalid(fmt.Sprintf("at most %d secrets may be active at once", maxSecrets))
	}
	var sealed []store.SealedSecret
	for i, sec := range secs {
		if sec == "" || len(sec) > 4096 {
			return nil, shared.Invalid(fmt.Sprintf("secrets[%d] must be 1 to 4096 bytes", i))
		}
		if sc, ok := p.(verify.SecretChecker); ok {
			if err := sc.CheckSecret([]byte(sec)); err != nil {
				return nil, shared.Invalid(fmt.Sprintf("secrets[%d]: %v", i, err))
			}
		}
		ct, err := s.ring.Seal([]byte(sec), intake.SealContext(ownerID, name))
		if err != nil {
			return nil, err
		}
		sealed = append(sealed, store.SealedSecret{Ciphertext: ct, Fingerprint: secrets.Fingerprint(s.fingerprintKey(), []byte(sec))})
	}
	return sealed, nil
}

// checkEvents checks the event names a source takes
// (shared.CheckEventFilter).
func checkEvents(events []string) error {
	for i, e := range events {
		if err := shared.CheckEventFilter(e); err != nil {
			return shared.Invalid(fmt.Sprintf("events[%d]: %v", i, err))
		}
	}
	return nil
}

func (s *Server) getSource(c *gin.Context)      { s.getSourceOf(c, hostOwner(c.Param("id"))) }
func (s *Server) getGroupSource(c *gin.Context) { s.getSourceOf(c, groupOwner(c.Param("id"))) }

func (s *Server) getSourceOf(c *gin.Context, o sourceOwner) {
	src, err := s.store.SourceGet(c.Request.Context(), o.id, c.Param("source"))
	if err == nil && !o.owns(src) {
		err = store.ErrNotFound
	}
	if err != nil {
		s.writeError(c, notFoundAs(err, "no such source"))
		return
	}
	c.JSON(200, s.SourceView(c, src))
}

func (s *Server) listSources(c *gin.Context)      { s.listSourcesOf(c, hostOwner(c.Param("id"))) }
func (s *Server) listGroupSources(c *gin.Context) { s.listSourcesOf(c, groupOwner(c.Param("id"))) }

func (s *Server) listSourcesOf(c *gin.Context, o sourceOwner) {
	if err := s.checkOwner(c.Request.Context(), o); err != nil {
		s.writeError(c, err)
		return
	}
	srcs, err := s.store.SourceList(c.Request.Context(), o.id)
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(200, gin.H{"sources": s.sourceViews(c, srcs)})
}

// sourceViews is each of srcs as SourceView shows it.
func (s *Server) sourceViews(c *gin.Context, srcs []*store.Source) []shared.Source {
	out := make([]shared.Source, 0, len(srcs))
	for _, src := range srcs {
		out = append(out, s.SourceView(c, src))
	}
	return out
}
