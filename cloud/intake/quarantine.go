package intake

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/verify"
	"github.com/relaykit/relay/shared"
)

// Quarantine keeps a request whose source secret cannot be decrypted (a
// rotated-away or lost key: the operator's fault, not the sender's), and
// returns ErrSecretUnavailable, answered 503 (Retry-After: a minute), so that a provider that retries does, and one that does not
// still has its event kept. ReleaseQuarantine takes it from there.
//
// Anyone can post while the keys are wrong, unsigned: so a host has
// QuarantinePerMin requests a minute and its share of the quarantine's room,
// past which requests are answered 503 and only counted; the log lines are
// sampled per host. The headers that carry the secret itself (token schemes)
// are not kept: a keyed hash of each is (withoutTokens).
func (s *Service) Quarantine(ctx context.Context, t *Target, req *verify.Request, clientIP string) error {
	src, provider, cause := t.Source, t.Provider, t.KeysErr
	logIt := s.quarantineLog.Allow(src.HostID, req.Now)
	if !s.quarantineRate.Allow(src.HostID, req.Now) {
		s.metrics.Count(provider.Name(), OutcomeQuarantineRateLimited)
		if logIt {
			s.log.Warn("request not quarantined: over the host's quarantine rate (its source secret cannot be decrypted with any key in RELAY_SECRET_KEYS)",
				"host", src.HostID, "source", src.Name, "quarantine_per_min", s.cfg.QuarantinePerMin)
		}
		return ErrSecretUnavailable
	}
	header, macs := withoutTokens(req.Header, verify.SecretHeaders(provider, src.Options), s.cfg.TokenKey())
	_, err := s.store.QuarantineInsert(ctx, &store.QuarantineInsertParams{
		QuarantinedRequest: store.QuarantinedRequest{
			HostID: src.HostID, Source: src.Name, URL: req.URL, Header: header, TokenMACs: macs,
			Body: req.Body, ClientIP: clientIP, ReceivedAt: req.Now,
		},
		MaxRows:      s.cfg.QuarantineMax,
		MaxBytes:     s.cfg.QuarantineMaxBytes,
		HostMaxRows:  s.cfg.QuarantineHostMax,
		HostMaxBytes: s.cfg.QuarantineHostMaxBytes,
	})
	switch {
	case err == nil:
		s.metrics.Count(provider.Name(), OutcomeQuarantined)
		s.metrics.QuarantineAdded()
		if logIt {
			s.log.Error("source secret cannot be decrypted with any key in RELAY_SECRET_KEYS: request quarantined until a key that decrypts it is configured",
				"host", src.HostID, "source", src.Name, "err", cause)
		}
	case errors.Is(err, store.ErrQuarantineHostFull):
		s.metrics.Count(provider.Name(), OutcomeQuarantineFull)
		if logIt {
			s.log.Error("the host's share of the quarantine is full: request not kept", "host", src.HostID, "source", src.Name,
				"host_max_requests", s.cfg.QuarantineHostMax, "host_max_bytes", s.cfg.QuarantineHostMaxBytes)
		}
	case errors.Is(err, store.ErrQuarantineFull):
		s.metrics.Count(provider.Name(), OutcomeQuarantineFull)
		if logIt {
			s.log.Error("quarantine full: request not kept", "host", src.HostID, "source", src.Name,
				"max_requests", s.cfg.QuarantineMax, "max_bytes", s.cfg.QuarantineMaxBytes)
		}
	default:
		s.metrics.Count(provider.Name(), OutcomeUnavailable)
		s.log.Error("quarantine insert failed", "host", src.HostID, "source", src.Name, "err", err)
	}
	return ErrSecretUnavailable
}

// withoutTokens is a request's headers without those that carry the
// source's secret itself (secret: the provider's SecretHeaders), and for
// each of these an HMAC-SHA256 of its value under key, by canonical name.
// The value checked is the first, as verification reads it.
func withoutTokens(h http.Header, secret []string, key []byte) (http.Header, map[string][]byte) {
	out := h.Clone()
	var macs map[string][]byte
	for _, name := range secret {
		canon := http.CanonicalHeaderKey(name)
		for k, vs := range out {
			if !strings.EqualFold(k, name) {
				continue
			}
			delete(out, k)
			if _, ok := macs[canon]; ok || len(vs) == 0 {
				continue
			}
			if macs == nil {
				macs = make(map[string][]byte)
			}
			macs[canon] = tokenMAC(key, []byte(vs[0]))
		}
	}
	return out, macs
}

func tokenMAC(key, token []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(token)
	return m.Sum(nil)
}

// restoreTokens gives a quarantined request back, in memory only, the
// token headers it came with: for each kept hash, the source secret whose
// hash under key equals it (compared in constant time, with every secret)
// is the token that was sent. It returns the headers it set, and whether a
// hash matched none of the secrets (a wrong token, or one hashed under
// another JWT key).
func restoreTokens(h http.Header, macs map[string][]byte, secrets [][]byte, key []byte) (set []string, unmatched bool) {
	for name, mac := range macs {
		var token []byte
		for _, sec := range secrets {
			if hmac.Equal(tokenMAC(key, sec), mac) && token == nil {
				token = sec
			}
		}
		if token == nil {
			unmatched = true
			continue
		}
		h.Set(name, string(token))
		set = append(set, name)
	}
	return set, unmatched
}

// ReleaseResult counts what one pass over the quarantine did.
type ReleaseResult struct {
	Admitted int // verified, then queued, duplicate or filtered
	Rejected int // failed verification, or their host or source is gone
	Held     int // the secret still cannot be decrypted
}

// ReleaseQuarantine verifies and admits every quarantined request whose
// source secret now decrypts, checking each signature and timestamp window as
// of the time the request arrived. Requests that fail are recorded as
// rejections; those whose secret still does not open stay. It stops at the
// first storage error (the next pass takes over). Several replicas may run it
// at once: an event admitted twice is a duplicate.
func (s *Service) ReleaseQuarantine(ctx context.Context) (ReleaseResult, error) {
	var res ReleaseResult
	var after int64
	// Quarantined requests pile up per source: each source is looked up and
	// its secrets opened once per pass, not once per request.
	sources := make(map[[2]string]*releaseSource)
	for {
		qs, err := s.store.QuarantineList(ctx, &store.QuarantineListParams{AfterID: after, Limit: 100, Kind: store.QuarantineSecret})
		if err != nil {
			return res, err
		}
		if len(qs) == 0 {
			break
		}
		for _, q := range qs {
			after = q.ID
			key := [2]string{q.HostID, q.Source}
			rs, ok := sources[key]
			if !ok {
				if rs, err = s.releaseSourceFor(ctx, q.HostID, q.Source); err != nil {
					return res, err
				}
				sources[key] = rs
			}
			held, admitted, err := s.releaseOne(ctx, q, rs)
			if err != nil {
				return res, err
			}
			switch {
			case held:
				res.Held++
				continue
			case admitted:
				res.Admitted++
			default:
				res.Rejected++
			}
			if err := s.store.QuarantineDelete(ctx, q.ID); err != nil {
				return res, err
			}
		}
	}
	s.metrics.SetQuarantined(res.Held)
	if res.Admitted+res.Rejected > 0 {
		s.log.Info("quarantine released", "admitted", res.Admitted, "rejected", res.Rejected, "held", res.Held)
	}
	return res, nil
}

// releaseSource is what a release pass knows of one source: gone (why it
// is gone), held (its secrets still do not open), or its target.
type releaseSource struct {
	gone string
	held bool
	t    *Target
}

// releaseSourceFor resolves a quarantined request's source, uncached; only
// a storage failure is an error.
func (s *Service) releaseSourceFor(ctx context.Context, hostID, name string) (*releaseSource, error) {
	t, err := s.resolve(ctx, hostID, name)
	if shared.CodeOf(err) == shared.CodeUnavailable {
		return nil, err
	}
	if err != nil {
		return &releaseSource{gone: err.Error()}, nil
	}
	if t.KeysErr != nil {
		return &releaseSource{held: true}, nil
	}
	return &releaseSource{t: t}, nil
}

func (s *Service) releaseOne(ctx context.Context, q *store.QuarantinedRequest, rs *releaseSource) (held, admitted bool, err error) {
	switch {
	case rs.gone != "":
		s.log.Warn("quarantined request dropped", "host", q.HostID, "source", q.Source, "reason", rs.gone)
		return false, false, nil
	case rs.held:
		return true, false, nil
	}
	src, provider := rs.t.Source, rs.t.Provider
	header := http.Header(q.Header)
	if header == nil {
		header = http.Header{}
	}
	tokens, unmatched := restoreTokens(header, q.TokenMACs, rs.t.Keys, s.cfg.TokenKey())
	req := &verify.Request{Header: header, Body: q.Body, Now: q.ReceivedAt, URL: q.URL}
	err = provider.Verify(req, rs.t.Keys, src.Options)
	if err != nil && unmatched {
		err = fmt.Errorf("token: %w", verify.ErrMismatch)
	}
	if err != nil {
		s.metrics.Count(provider.Name(), OutcomeBadSignature)
		rerr := s.store.RejectionInsert(ctx, &store.Rejection{
			HostID: q.HostID, Source: q.Source, At: s.now(), Status: 401,
			Reason:   shared.Truncate("quarantined request failed verification: signature: "+err.Error(), 500),
			ClientIP: q.ClientIP, HeaderNames: HeaderNames(req.Header),
		})
		return false, false, rerr
	}
	// Verified: the tokens go no further than the check.
	for _, name := range tokens {
		header.Del(name)
	}
	if _, err := s.Admit(ctx, rs.t, req, "released from quarantine", q.ReceivedAt, From{Guard: true, ClientIP: q.ClientIP}); err != nil {
		return false, false, err
	}
	return false, true, nil
}

// RunQuarantineRelease releases the quarantine at once and then every
// interval until ctx ends.
func (s *Service) RunQuarantineRelease(ctx context.Context, clock clockwork.Clock, every time.Duration) {
	t := clock.NewTicker(every)
	defer t.Stop()
	for {
		if _, err := s.ReleaseQuarantine(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("quarantine release pass failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
	}
}

// ReleaseHeld admits a held suspected replay past the replay guard — a
// new delivery, its receipt audited as released by an operator — and it
// leaves the quarantine. Requests waiting for a key are released by the
// passes (ReleaseQuarantine), never one by one: a conflict. A held request
// whose host or source is gone is dropped: not found, saying so.
func (s *Service) ReleaseHeld(ctx context.Context, id int64) (*Admitted, error) {
	q, err := s.store.QuarantineGet(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, shared.NotFound("no such quarantined request")
	}
	if err != nil {
		return nil, shared.Unavailable(err)
	}
	if q.Kind != store.QuarantineReplay {
		return nil, &shared.Error{Code: shared.CodeConflict,
			Message: "this request waits for a key that decrypts its source's secret: the release passes take it (POST /api/quarantine/release)"}
	}
	t, err := s.resolve(ctx, q.HostID, q.Source)
	if shared.CodeOf(err) == shared.CodeUnavailable {
		return nil, err
	}
	if err != nil {
		// Its host or source is gone: nothing to deliver it to.
		if derr := s.store.QuarantineDelete(ctx, id); derr != nil {
			return nil, shared.Unavailable(derr)
		}
		s.log.Warn("held request dropped on release", "host", q.HostID, "source", q.Source, "reason", err.Error())
		return nil, shared.NotFound("its host or source is gone: the held request was dropped")
	}
	header := http.Header(q.Header)
	if header == nil {
		header = http.Header{}
	}
	req := &verify.Request{Header: header, Body: q.Body, Now: q.ReceivedAt, URL: q.URL}
	res, err := s.Admit(ctx, t, req, "released by an operator, held as a "+q.Reason, q.ReceivedAt,
		From{Guard: false, ClientIP: q.ClientIP})
	if err != nil {
		return nil, shared.Unavailable(err)
	}
	// Admitted before it leaves: released twice, the second is a duplicate.
	if err := s.store.QuarantineDelete(ctx, id); err != nil {
		return nil, shared.Unavailable(err)
	}
	s.log.Info("held request released by an operator", "host", q.HostID, "source", q.Source,
		"quarantine_id", id, "delivery_id", res.Response.DeliveryID, "status", res.Response.Status)
	return res, nil
}
