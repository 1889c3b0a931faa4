package intake

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/relaykit/relay/cloud/alert"
	"github.com/relaykit/relay/cloud/secrets"
	"github.com/relaykit/relay/cloud/store"
)

// The canary is a known value sealed with the key ring beside the source
// secrets: if no configured key opens it, the stored secrets will not open
// either, and the operator is told so at start-up rather than webhook by
// webhook.
const (
	canaryKey       = "secrets_canary"
	canaryPlaintext = "relay secrets canary"
)

var canaryContext = []byte("canary")

// CanaryStatus is what CheckCanary found.
type CanaryStatus struct {
	OK       bool   // a configured key opens the canary
	Created  bool   // there was none: one was sealed with the first key
	KeyID    string // the key the canary is sealed with
	Outdated bool   // it opens, but with a key other than the first: run `cloud rekey`
}

// CheckCanary opens the canary with the ring, sealing one with the first key
// when there is none yet. A canary no key opens is reported, not replaced.
func CheckCanary(ctx context.Context, st CanaryStore, ring *secrets.Ring) (CanaryStatus, error) {
	sealed, err := st.MetaGet(ctx, canaryKey)
	if errors.Is(err, store.ErrNotFound) {
		sealed, err = ring.Seal([]byte(canaryPlaintext), canaryContext)
		if err != nil {
			return CanaryStatus{}, err
		}
		if err := st.MetaPut(ctx, canaryKey, sealed); err != nil {
			return CanaryStatus{}, err
		}
		return CanaryStatus{OK: true, Created: true, KeyID: ring.SealingKeyID()}, nil
	}
	if err != nil {
		return CanaryStatus{}, err
	}
	st2 := CanaryStatus{KeyID: secrets.KeyID(sealed)}
	pt, err := ring.Open(sealed, canaryContext)
	if err != nil || string(pt) != canaryPlaintext {
		return st2, nil
	}
	st2.OK = true
	st2.Outdated = st2.KeyID != ring.SealingKeyID()
	return st2, nil
}

// ReportCanary checks the canary and logs what an operator must know; the
// relay_secret_keys_ok gauge follows it.
func (s *Service) ReportCanary(ctx context.Context) error {
	cs, err := CheckCanary(ctx, s.store, s.ring)
	if err != nil {
		return fmt.Errorf("secrets canary: %w", err)
	}
	switch {
	case !cs.OK:
		s.metrics.KeysOK(false)
		s.log.Error("no key in RELAY_SECRET_KEYS decrypts the stored secrets: webhooks to their sources are quarantined and answered 503 until the key that sealed them is configured again",
			"sealed_with_key_id", cs.KeyID, "configured_key_ids", s.ring.KeyIDs())
	case cs.Outdated:
		s.metrics.KeysOK(true)
		s.log.Warn("stored secrets are sealed with an older key: run `cloud rekey` to re-encrypt them with the first key, then drop the old one",
			"sealed_with_key_id", cs.KeyID, "first_key_id", s.ring.SealingKeyID())
	default:
		s.metrics.KeysOK(true)
	}
	return nil
}

// ReloadKeys makes the server use ring from now on: the targets it cached
// with secrets opened by the old ring are dropped, the canary is checked
// with the new one, and a quarantine release pass runs at once, so requests
// held for a key the new ring has are admitted without waiting a minute.
func (s *Service) ReloadKeys(ctx context.Context, ring *secrets.Ring) error {
	s.ring.Replace(ring)
	s.targets.reset()
	s.log.Info("secret keys reloaded", "key_ids", ring.KeyIDs(), "first_key_id", ring.SealingKeyID())
	if err := s.ReportCanary(ctx); err != nil {
		return err
	}
	if _, err := s.ReleaseQuarantine(ctx); err != nil {
		return fmt.Errorf("quarantine release: %w", err)
	}
	return nil
}

// RekeyResult counts what Rekey did.
type RekeyResult struct {
	Sources   int      // sources looked at
	Rewritten int      // sources whose secrets were re-encrypted
	Secrets   int      // secrets re-encrypted
	Sinks     int      // alert sinks whose URL and secret were re-encrypted
	Failed    []string // "host/source: why" for sources left as they were ("sink id: why" for sinks)
}

// Rekey re-encrypts every stored secret (and the canary) with the ring's
// first key. A source whose secrets no configured key opens is left as it
// is and listed in Failed; a source changed meanwhile is read again.
func Rekey(ctx context.Context, st RekeyStore, ring *secrets.Ring, now time.Time) (RekeyResult, error) {
	var res RekeyResult
	sources, err := st.SourceListAll(ctx)
	if err != nil {
		return res, err
	}
	first := ring.SealingKeyID()
	for _, src := range sources {
		res.Sources++
		for attempt := 0; ; attempt++ {
			n, err := rekeySource(ctx, st, ring, src, first, now)
			if errors.Is(err, store.ErrConflict) && attempt < 3 {
				if src, err = st.SourceGet(ctx, src.HostID, src.Name); err != nil {
					return res, err
				}
				continue
			}
			var openErr *openError
			switch {
			case errors.As(err, &openErr):
				res.Failed = append(res.Failed, src.HostID+"/"+src.Name+": "+openErr.Error())
			case err != nil:
				return res, err
			case n > 0:
				res.Rewritten++
				res.Secrets += n
			}
			break
		}
	}
	sinks, err := st.AlertSinkList(ctx)
	if err != nil {
		return res, err
	}
	for _, k := range sinks {
		changed, err := alert.ResealSink(ring, k)
		switch {
		case err != nil:
			res.Failed = append(res.Failed, "sink "+k.ID+": "+err.Error())
		case changed:
			if err := st.AlertSinkReseal(ctx, &store.AlertSinkResealParams{ID: k.ID, URLSealed: k.URLSealed, SecretSealed: k.SecretSealed}); err != nil && !errors.Is(err, store.ErrNotFound) {
				return res, err
			}
			res.Sinks++
		}
	}
	sealed, err := ring.Seal([]byte(canaryPlaintext), canaryContext)
	if err != nil {
		return res, err
	}
	if len(res.Failed) == 0 {
		if err := st.MetaPut(ctx, canaryKey, sealed); err != nil {
			return res, err
		}
	}
	return res, nil
}

type openError struct{ err error }

func (e *openError) Error() string { return e.err.Error() }

func rekeySource(ctx context.Context, st RekeyStore, ring *secrets.Ring, src *store.Source, first string, now time.Time) (int, error) {
	out := make([]store.SealedSecret, len(src.Secrets))
	n := 0
	for i, sec := range src.Secrets {
		out[i] = sec
		if secrets.KeyID(sec.Ciphertext) == first {
			continue
		}
		ctxt := SealContext(src.HostID, src.Name)
		pt, err := ring.Open(sec.Ciphertext, ctxt)
		if err != nil {
			return 0, &openError{fmt.Errorf("secret %s: %w", SecretLabel(i, sec), err)}
		}
		if out[i].Ciphertext, err = ring.Seal(pt, ctxt); err != nil {
			return 0, err
		}
		n++
	}
	if n == 0 {
		return 0, nil
	}
	return n, st.SourceSetSecrets(ctx, &store.SourceSetSecretsParams{
		HostID: src.HostID, Name: src.Name, Secrets: out, UpdatedAt: src.UpdatedAt, Now: now,
	})
}

// SealContext binds a sealed secret to its host and source.
func SealContext(hostID, source string) []byte { return []byte(hostID + "/" + source) }

// SecretLabel names a source's i-th secret in errors and logs: by its
// fingerprint, or by its place when the fingerprint stored is unkeyed.
func SecretLabel(i int, sec store.SealedSecret) string {
	if secrets.Unkeyed(sec.Fingerprint) {
		return fmt.Sprintf("#%d", i+1)
	}
	return sec.Fingerprint
}

// openSecrets opens a source's secrets with the ring.
func (s *Service) openSecrets(src *store.Source) ([][]byte, error) {
	keys := make([][]byte, 0, len(src.Secrets))
	for i, sec := range src.Secrets {
		k, err := s.ring.Open(sec.Ciphertext, SealContext(src.HostID, src.Name))
		if err != nil {
			if errors.Is(err, secrets.ErrNoKey) {
				return nil, err
			}
			return nil, fmt.Errorf("secret %s: %w", SecretLabel(i, sec), err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}
