package alert

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/relaykit/relay/cloud/secrets"
	"github.com/relaykit/relay/cloud/store"
)

// Sink kinds.
const (
	SinkWebhook = "webhook" // a JSON POST signed with Standard Webhooks
	SinkSlack   = "slack"   // a Slack incoming webhook
)

// The key ring's contexts of a sink's sealed URL and secret.
var (
	sinkURLContext    = []byte("alert-sink-url")
	sinkSecretContext = []byte("alert-sink-secret")
)

// NewSink returns a sink of kind to rawURL, its URL (which may carry a
// token, as Slack's do) and, for a webhook sink, a new Standard Webhooks
// signing secret sealed by ring. The secret is returned in clear once, to
// be shown to the admin; it is never shown again. A URL whose host is an
// IP address in a refused network that allow does not list is an error
// wrapping ErrSinkAddress; the address a name resolves to is checked each
// time a notification is sent.
func NewSink(ring *secrets.Ring, kind, rawURL string, allow []netip.Prefix, now time.Time) (*store.AlertSink, string, error) {
	if kind != SinkWebhook && kind != SinkSlack {
		return nil, "", fmt.Errorf("kind must be %q or %q", SinkWebhook, SinkSlack)
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || len(rawURL) > 2000 {
		return nil, "", errors.New("url must be an http:// or https:// URL without credentials, at most 2000 bytes")
	}
	if err := checkSinkHost(u, allow); err != nil {
		return nil, "", err
	}
	urlSealed, err := ring.Seal([]byte(rawURL), sinkURLContext)
	if err != nil {
		return nil, "", err
	}
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	s := &store.AlertSink{ID: "snk_" + hex.EncodeToString(id), Kind: kind, Target: u.Scheme + "://" + u.Host,
		URLSealed: urlSealed, CreatedAt: now}
	var secret string
	if kind == SinkWebhook {
		key := make([]byte, 24)
		_, _ = rand.Read(key)
		secret = "whsec_" + base64.StdEncoding.EncodeToString(key)
		if s.SecretSealed, err = ring.Seal([]byte(secret), sinkSecretContext); err != nil {
			return nil, "", err
		}
	}
	return s, secret, nil
}

// ResealSink seals a sink's URL and secret again with ring's first key
// (cloud rekey), and reports whether they changed; an error when no key
// of ring opens them.
func ResealSink(ring *secrets.Ring, s *store.AlertSink) (bool, error) {
	first := ring.SealingKeyID()
	changed := false
	for _, f := range []struct {
		sealed *string
		ctx    []byte
	}{{&s.URLSealed, sinkURLContext}, {&s.SecretSealed, sinkSecretContext}} {
		if *f.sealed == "" || secrets.KeyID(*f.sealed) == first {
			continue
		}
		pt, err := ring.Open(*f.sealed, f.ctx)
		if err != nil {
			return false, err
		}
		if *f.sealed, err = ring.Seal(pt, f.ctx); err != nil {
			return false, err
		}
		changed = true
	}
	return changed, nil
}

// backoff is the wait after a sink's attempts-th failed attempt: 1 s,
// doubling, at most 5 min. Nothing is ever dropped.
func backoff(attempts int) time.Duration {
	d := time.Second
	for range min(attempts, 10) {
		d *= 2
	}
	return min(d, 5*time.Minute)
}

// send sends what the outbox has due, each sink's notifications in order,
// until nothing is due or nothing more went through, for at most an
// interval: sinks that answer slowly delay the next evaluation by no more.
func (e *Evaluator) send(ctx context.Context) error {
	start := e.clock.Now()
	for range 100 {
		if e.clock.Since(start) > e.cfg.Interval {
			return nil
		}
		now := e.now()
		due, err := e.store.AlertOutboxDue(ctx, &store.AlertOutboxDueParams{Now: now, Limit: 100})
		if err != nil || len(due) == 0 {
			return err
		}
		progressed := false
		for _, n := range due {
			err := e.deliver(ctx, n, now)
			if err == nil {
				progressed = true
				e.metrics.notifications.WithLabelValues(n.Sink.Kind, "sent").Inc()
				e.metrics.sinkFailures.WithLabelValues(n.Sink.ID).Set(0)
				if err := e.store.AlertOutboxSent(ctx, &store.AlertOutboxSentParams{ID: n.ID, SinkID: n.Sink.ID, Now: now}); err != nil {
					return err
				}
				continue
			}
			e.metrics.notifications.WithLabelValues(n.Sink.Kind, "failed").Inc()
			e.metrics.sinkFailures.WithLabelValues(n.Sink.ID).Set(float64(n.Sink.Failures + 1))
			next := now.Add(backoff(n.Attempts))
			e.log.Warn("alert sink failed; retrying", "sink", n.Sink.ID, "target", n.Sink.Target, "attempts", n.Attempts+1,
				"retry_in", next.Sub(now), "err", err)
			if err := e.store.AlertOutboxFailed(ctx, &store.AlertOutboxFailedParams{ID: n.ID, SinkID: n.Sink.ID,
				Error: err.Error(), NextAt: next, Now: now}); err != nil {
				return err
			}
		}
		if !progressed {
			return nil
		}
	}
	return nil
}

// deliver sends one notification to its sink; a 2xx answer is success.
func (e *Evaluator) deliver(ctx context.Context, n *store.AlertNotification, now time.Time) error {
	target, err := e.ring.Open(n.Sink.URLSealed, sinkURLContext)
	if err != nil {
		return fmt.Errorf("open sink url: %w", err)
	}
	var body []byte
	header := http.Header{"Content-Type": {"application/json"}, "User-Agent": {"relay-alerts"}}
	switch n.Sink.Kind {
	case SinkSlack:
		if body, err = slackMessage(n.Payload); err != nil {
			return err
		}
	default:
		secret, err := e.ring.Open(n.Sink.SecretSealed, sinkSecretContext)
		if err != nil {
			return fmt.Errorf("open sink secret: %w", err)
		}
		body = n.Payload
		msgID := "msg_" + strconv.FormatInt(n.ID, 10)
		sig, err := Sign(string(secret), msgID, now, body)
		if err != nil {
			return err
		}
		header.Set("webhook-id", msgID)
		header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
		header.Set("webhook-signature", sig)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, string(target), bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("sink request: %w", err)
	}
	req.Header = header
	resp, err := e.client.Do(req)
	if err != nil {
		// The error names the URL, which may carry a token: say only
		// what failed.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return fmt.Errorf("post to %s: %w", n.Sink.Target, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode >= 300 && resp.StatusCode <= 399 {
		return fmt.Errorf("post to %s: answered %d, a redirect: not followed", n.Sink.Target, resp.StatusCode)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("post to %s: answered %d", n.Sink.Target, resp.StatusCode)
	}
	return nil
}

// Sign is the Standard Webhooks signature of a message: "v1," and the
// base64 HMAC-SHA256, keyed by the secret's bytes (after "whsec_"), of
// "id.timestamp.body".
func Sign(secret, msgID string, at time.Time, body []byte) (string, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return "", fmt.Errorf("sink secret: %w", err)
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%d.", msgID, at.Unix())
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)), nil
}

// slackMessage is a notification as a Slack incoming webhook shows it:
// what, which host, since when, and a link.
func slackMessage(payload []byte) ([]byte, error) {
	var n Notification
	if err := json.Unmarshal(payload, &n); err != nil {
		return nil, fmt.Errorf("notification: %w", err)
	}
	var b strings.Builder
	switch n.Type {
	case "alert.resolved":
		b.WriteString(":white_check_mark: *Resolved* ")
	case "alert.reminder":
		b.WriteString(":rotating_light: *Still firing* ")
	default:
		b.WriteString(":rotating_light: *Firing* ")
	}
	fmt.Fprintf(&b, "`%s`: %s\nSince %s", n.Data.Rule, slackEscape(n.Data.Summary), n.Data.StartedAt.Format(time.RFC3339))
	if n.Data.ResolvedAt != nil {
		fmt.Fprintf(&b, ", resolved %s (lasted %s)", n.Data.ResolvedAt.Format(time.RFC3339),
			n.Data.ResolvedAt.Sub(n.Data.StartedAt).Round(time.Second))
	}
	if n.Data.Link != "" {
		fmt.Fprintf(&b, "\n<%s|Open in the relay>", n.Data.Link)
	}
	return json.Marshal(map[string]string{"text": b.String()})
}

// slackEscape escapes the characters Slack's mrkdwn gives a meaning.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
