package intake

import (
	"context"
	"errors"
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
