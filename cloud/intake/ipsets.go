package intake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/relaykit/relay/cloud/ipallow"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

// resolveAllow turns a source's allowlist into the prefixes intake checks:
// its CIDRs, and the prefixes of the sets it names as stored, else as
// shipped. A set that holds none yet allows nothing. Errors are storage
// failures.
func (s *Service) resolveAllow(ctx context.Context, src *store.Source) (*ipallow.List, error) {
	if len(src.AllowedIPs) == 0 {
		return nil, nil
	}
	l := &ipallow.List{Restricted: true}
	for _, raw := range src.AllowedIPs {
		e, err := ipallow.ParseEntry(raw)
		if err != nil {
			// Stored by an older build that knew a set this one does not:
			// it allows nothing.
			s.log.Warn("source allowlist entry ignored", "host", src.HostID, "source", src.Name, "err", err)
			continue
		}
		if e.Set == "" {
			l.Prefixes = append(l.Prefixes, e.Prefix)
			continue
		}
		set, err := s.IPSet(ctx, e.Set)
		if err != nil {
			return nil, err
		}
		l.Prefixes = append(l.Prefixes, ipallow.Prefixes(set.Prefixes)...)
	}
	return l, nil
}

// IPSet is a named set as in force: stored by a refresh, else as shipped.
func (s *Service) IPSet(ctx context.Context, name string) (*shared.IPSet, error) {
	pub, _ := ipallow.Lookup(name)
	out := &shared.IPSet{Name: name, Prefixes: []string{}}
	if pub != nil {
		out.URL = s.IPSetURL(pub)
	}
	stored, err := s.store.IPSetGet(ctx, name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		stored = nil
	case err != nil:
		return nil, err
	}
	if stored != nil {
		out.LastError = stored.LastError
		out.CheckedAt = timePtr(stored.CheckedAt)
	}
	switch {
	case stored != nil && len(stored.Prefixes) > 0:
		out.Prefixes, out.Origin = stored.Prefixes, stored.Origin
		out.TakenAt, out.RefreshedAt = timePtr(stored.TakenAt), timePtr(stored.RefreshedAt)
	case pub != nil && len(pub.Shipped) > 0:
		out.Prefixes = ipallow.Strings(ipallow.Prefixes(pub.Shipped))
		out.Origin, out.TakenAt = "shipped", timePtr(pub.ShippedAt)
	}
	out.Size = len(out.Prefixes)
	return out, nil
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// IPSetURL is where a set is refreshed from: the setting's URL for it,
// else the provider's.
func (s *Service) IPSetURL(pub *ipallow.Publisher) string {
	if u := s.cfg.IPSetURLs[pub.Name]; u != "" {
		return u
	}
	return pub.URL
}

// MaxIPSetBytes bounds a published list, read or sent.
const MaxIPSetBytes = 4 << 20

// StoreIPSet parses a published list and stores it as the set's, dropping
// every cached target at once (other replicas drop theirs when the store
// tells them). A list that does not parse or is empty is recorded as the
// set's last error, logged, and returned; the set stays as it was.
// Storage failures are ErrUnavailable.
func (s *Service) StoreIPSet(ctx context.Context, pub *ipallow.Publisher, data []byte, origin string) error {
	now := s.now()
	prefixes, err := ipallow.ParsePublished(data, pub.Field)
	if err != nil {
		return s.ipSetFailed(ctx, pub, origin, fmt.Errorf("IP set %s from %s: %w", pub.Name, origin, err))
	}
	_, err = s.store.IPSetPut(ctx, &store.IPSetPutParams{Name: pub.Name, Prefixes: ipallow.Strings(prefixes),
		Origin: origin, TakenAt: now, Now: now})
	s.ForgetAll()
	if err != nil {
		return shared.Unavailable(err)
	}
	s.log.Info("IP set refreshed", "set", pub.Name, "origin", origin, "prefixes", len(prefixes))
	return nil
}

// ipSetFailed records and logs a refresh that failed, and returns its
// error.
func (s *Service) ipSetFailed(ctx context.Context, pub *ipallow.Publisher, origin string, cause error) error {
	s.log.Warn("IP set not refreshed; the last good set stays", "set", pub.Name, "origin", origin, "err", cause)
	if _, err := s.store.IPSetFailed(ctx, &store.IPSetFailedParams{Name: pub.Name, Origin: origin,
		Error: cause.Error(), Now: s.now()}); err != nil {
		return shared.Unavailable(err)
	}
	return cause
}

// RefreshIPSets refreshes every named set from where its provider
// publishes it (or the URL its setting gives). A set that cannot be read,
// parsed or is empty keeps its last good prefixes; its error is recorded
// (GET /api/ipsets) and logged.
func (s *Service) RefreshIPSets(ctx context.Context) {
	for _, pub := range ipallow.Publishers {
		url := s.IPSetURL(pub)
		data, err := s.fetchIPSet(ctx, url)
		if err != nil {
			_ = s.ipSetFailed(ctx, pub, url, fmt.Errorf("IP set %s from %s: %w", pub.Name, url, err))
			continue
		}
		_ = s.StoreIPSet(ctx, pub, data, url)
	}
}

// ipSetFetchTimeout bounds one fetch of a published list.
const ipSetFetchTimeout = 30 * time.Second

func (s *Service) fetchIPSet(ctx context.Context, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, ipSetFetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json, text/plain")
	client := s.cfg.IPSetClient
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("answered %s", resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxIPSetBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxIPSetBytes {
		return nil, fmt.Errorf("over %d bytes", MaxIPSetBytes)
	}
	return data, nil
}
