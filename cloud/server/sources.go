package server

import (
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/secrets"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/verify"
)

var (
	sourceNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	eventNameRE  = regexp.MustCompile(`^[A-Za-z0-9_.:*-]{1,128}$`)
)

// sourceRequest is PUT /api/hosts/:id/sources/:source. Secrets are
// write-only: omitted keeps the stored ones, a list replaces them.
type sourceRequest struct {
	Provider     string            `json:"provider"`
	Enabled      *bool             `json:"enabled"`
	Events       []string          `json:"events"`
	Secrets      []string          `json:"secrets"`
	Options      map[string]string `json:"options"`
	MaxBodyBytes int64             `json:"max_body_bytes"`
}

type sourceJSON struct {
	Name               string            `json:"name"`
	Provider           string            `json:"provider"`
	Enabled            bool              `json:"enabled"`
	Events             []string          `json:"events"`
	SecretFingerprints []string          `json:"secret_fingerprints"`
	Options            map[string]string `json:"options"`
	MaxBodyBytes       int64             `json:"max_body_bytes"`
	WebhookURL         string            `json:"webhook_url"`
	CreatedAt          time.Time         `json:"created_at"`
	UpdatedAt          time.Time         `json:"updated_at"`
}

func (s *Server) sourceView(c *gin.Context, src *store.Source) sourceJSON {
	fps := make([]string, 0, len(src.Secrets))
	for _, sec := range src.Secrets {
		fps = append(fps, sec.Fingerprint)
	}
	events := src.Events
	if events == nil {
		events = []string{}
	}
	opts := src.Options
	if opts == nil {
		opts = map[string]string{}
	}
	limit := src.MaxBodyBytes
	if p, ok := verify.Lookup(src.Provider); ok && limit == 0 {
		limit = p.MaxBody()
	}
	return sourceJSON{
		Name: src.Name, Provider: src.Provider, Enabled: src.Enabled, Events: events,
		SecretFingerprints: fps, Options: opts, MaxBodyBytes: limit,
		WebhookURL: s.publicURL(c) + "/api/webhooks/" + src.HostID + "/" + src.Name,
		CreatedAt:  src.CreatedAt, UpdatedAt: src.UpdatedAt,
	}
}

// sealContext binds a sealed secret to its host and source.
func sealContext(hostID, source string) []byte { return []byte(hostID + "/" + source) }

func (s *Server) putSource(c *gin.Context) {
	hostID, name := c.Param("id"), c.Param("source")
	if !sourceNameRE.MatchString(name) {
		s.writeError(c, errInvalid("source name must be 1 to 64 of a-z, 0-9, '_' and '-', starting with a letter or digit"))
		return
	}
	var req sourceRequest
	if err := decodeJSON(c, 256<<10, &req); err != nil {
		s.writeError(c, err)
		return
	}
	if req.Provider == "" {
		req.Provider = name
	}
	p, ok := verify.Lookup(req.Provider)
	if !ok {
		s.writeError(c, errInvalid(fmt.Sprintf("unknown provider %q; known: %v", req.Provider, verify.Names())))
		return
	}
	for _, e := range req.Events {
		if !eventNameRE.MatchString(e) {
			s.writeError(c, errInvalid(fmt.Sprintf("bad event name %q", e)))
			return
		}
	}
	if oc, ok := p.(verify.OptionsChecker); ok {
		if err := oc.CheckOptions(req.Options); err != nil {
			s.writeError(c, errInvalid("options: "+err.Error()))
			return
		}
	}
	if req.MaxBodyBytes < 0 || req.MaxBodyBytes > 100<<20 {
		s.writeError(c, errInvalid("max_body_bytes must be between 0 (provider default) and 104857600"))
		return
	}
	if len(req.Secrets) > 10 {
		s.writeError(c, errInvalid("at most 10 secrets may be active at once"))
		return
	}

	existing, err := s.store.SourceGet(c, hostID, name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		existing = nil
	case err != nil:
		s.writeError(c, err)
		return
	}
	var sealed []store.SealedSecret
	switch {
	case req.Secrets != nil:
		for i, sec := range req.Secrets {
			if sec == "" || len(sec) > 4096 {
				s.writeError(c, errInvalid(fmt.Sprintf("secrets[%d] must be 1 to 4096 bytes", i)))
				return
			}
			if sc, ok := p.(verify.SecretChecker); ok {
				if err := sc.CheckSecret([]byte(sec)); err != nil {
					s.writeError(c, errInvalid(fmt.Sprintf("secrets[%d]: %v", i, err)))
					return
				}
			}
			ct, err := s.ring.Seal([]byte(sec), sealContext(hostID, name))
			if err != nil {
				s.writeError(c, err)
				return
			}
			sealed = append(sealed, store.SealedSecret{Ciphertext: ct, Fingerprint: secrets.Fingerprint([]byte(sec))})
		}
	case existing != nil:
		sealed = existing.Secrets
	}
	if len(sealed) == 0 {
		s.writeError(c, errInvalid("secrets: at least one secret is required"))
		return
	}
	enabled := true
	if req.Enabled != nil {
		enabled = *req.Enabled
	}
	src, err := s.store.SourceUpsert(c, &store.SourceUpsertParams{
		HostID: hostID, Name: name, Provider: p.Name(), Enabled: enabled, Events: req.Events,
		Secrets: sealed, Options: req.Options, MaxBodyBytes: req.MaxBodyBytes, Now: s.now(),
	})
	if err != nil {
		s.writeError(c, hostErr(err))
		return
	}
	status := 200
	if existing == nil {
		status = 201
	}
	c.JSON(status, s.sourceView(c, src))
}

func (s *Server) getSource(c *gin.Context) {
	src, err := s.store.SourceGet(c, c.Param("id"), c.Param("source"))
	if errors.Is(err, store.ErrNotFound) {
		s.writeError(c, errNotFound("no such source"))
		return
	}
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(200, s.sourceView(c, src))
}

func (s *Server) listSources(c *gin.Context) {
	if _, err := s.store.HostGet(c, c.Param("id")); err != nil {
		s.writeError(c, hostErr(err))
		return
	}
	srcs, err := s.store.SourceList(c, c.Param("id"))
	if err != nil {
		s.writeError(c, err)
		return
	}
	out := make([]sourceJSON, 0, len(srcs))
	for _, src := range srcs {
		out = append(out, s.sourceView(c, src))
	}
	c.JSON(200, gin.H{"sources": out})
}
