package server

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/secrets"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/verify"
	"github.com/relaykit/relay/shared"
)

// errBadSignature is the one answer for every verification failure.
var errBadSignature = &apiError{status: 401, code: shared.CodeUnauthorized, message: "signature verification failed"}

// intake takes POST /api/webhooks/:hostId/:source. In order: host exists and
// is active, source configured and enabled, body within the limit, signature,
// event filter, dedupe and durable insert — and only then 200.
func (s *Server) intake(c *gin.Context) {
	ctx := c.Request.Context()
	hostID, name := c.Param("hostId"), c.Param("source")

	host, err := s.store.HostGet(ctx, hostID)
	if errors.Is(err, store.ErrNotFound) {
		s.writeError(c, errNotFound("no such host"))
		return
	}
	if err != nil {
		s.writeError(c, errUnavailable(err))
		return
	}
	if host.Status != store.HostActive {
		s.writeError(c, &apiError{status: 410, code: shared.CodeGone, message: "host is deactivated"})
		return
	}
	src, err := s.store.SourceGet(ctx, hostID, name)
	if errors.Is(err, store.ErrNotFound) {
		s.writeError(c, errNotFound("no such source on this host"))
		return
	}
	if err != nil {
		s.writeError(c, errUnavailable(err))
		return
	}
	if !src.Enabled {
		s.writeError(c, errNotFound("source is disabled"))
		return
	}
	provider, ok := verify.Lookup(src.Provider)
	if !ok {
		s.writeError(c, fmt.Errorf("source %s/%s: unknown provider %q", hostID, name, src.Provider))
		return
	}

	body, err := readLimited(c, src.MaxBodyBytes, provider.MaxBody())
	if err != nil {
		s.writeError(c, err)
		return
	}

	keys, err := s.openSecrets(src)
	if err != nil {
		s.log.Error("source secret cannot be decrypted: check RELAY_SECRET_KEYS",
			"host", hostID, "source", name, "err", err)
		s.writeError(c, &apiError{status: 503, code: shared.CodeUnavailable, message: "source secret unavailable, retry later"})
		return
	}
	req := &verify.Request{Header: c.Request.Header, Body: body, Now: s.clock.Now()}
	if err := provider.Verify(req, keys, src.Options); err != nil {
		s.log.Info("webhook rejected", "host", hostID, "source", name, "reason", err.Error(),
			"remote", c.ClientIP())
		s.writeError(c, errBadSignature)
		return
	}
	ev := provider.Event(req, src.Options)

	if !shared.EventWanted(src.Events, ev.Type, ev.Action) || !subscribed(host.Subscription, name, ev) {
		c.JSON(200, shared.IntakeResponse{Status: shared.IntakeFiltered})
		return
	}

	received := s.now()
	res, err := s.store.DeliveryInsert(ctx, &store.DeliveryInsertParams{
		ID:            name + ":" + ev.ID + ":" + strconv.FormatInt(received.UnixMilli(), 10),
		HostID:        hostID,
		Source:        name,
		EventID:       ev.ID,
		EventType:     truncate(ev.Type, 200),
		EventAction:   truncate(ev.Action, 200),
		Headers:       providerHeaders(c.Request.Header),
		RawBody:       body,
		MaxAttempts:   s.cfg.RetryPolicy.MaxAttempts(),
		CorrelationID: newCorrelationID(),
		ReceivedAt:    received,
	})
	if err != nil {
		s.writeError(c, errUnavailable(err))
		return
	}
	status := shared.IntakeQueued
	if res.Outcome == store.InsertDuplicate {
		status = shared.IntakeDuplicate
	}
	s.log.LogAttrs(ctx, slog.LevelDebug, "webhook stored", slog.String("delivery_id", res.Delivery.ID),
		slog.String("outcome", string(res.Outcome)))
	c.JSON(provider.SuccessStatus(), shared.IntakeResponse{DeliveryID: res.Delivery.ID, Status: status})
}

// readLimited reads the raw body, never past the limit: a declared length
// over it is refused before reading, and a streamed body is cut at limit+1.
func readLimited(c *gin.Context, sourceLimit, providerLimit int64) ([]byte, error) {
	limit := sourceLimit
	if limit <= 0 {
		limit = providerLimit
	}
	tooLarge := &apiError{status: 413, code: shared.CodeTooLarge, message: fmt.Sprintf("body over this source's limit of %d bytes", limit)}
	if c.Request.ContentLength > limit {
		c.Header("Connection", "close")
		return nil, tooLarge
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, limit))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, tooLarge
	}
	if err != nil {
		return nil, errInvalid("could not read body: " + err.Error())
	}
	return body, nil
}

func (s *Server) openSecrets(src *store.Source) ([][]byte, error) {
	keys := make([][]byte, 0, len(src.Secrets))
	for _, sec := range src.Secrets {
		k, err := s.ring.Open(sec.Ciphertext, sealContext(src.HostID, src.Name))
		if err != nil {
			if errors.Is(err, secrets.ErrNoKey) {
				return nil, err
			}
			return nil, fmt.Errorf("secret %s: %w", sec.Fingerprint, err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// subscribed applies the host's own reported subscription, if it sent one.
func subscribed(raw json.RawMessage, source string, ev verify.Event) bool {
	if len(raw) == 0 {
		return true
	}
	var sub shared.Subscription
	if json.Unmarshal(raw, &sub) != nil || sub.Webhooks == nil {
		return true
	}
	ss, ok := sub.Webhooks[source]
	if !ok || !ss.Enabled {
		return false
	}
	return shared.EventWanted(ss.Events, ev.Type, ev.Action)
}

// dropHeaders are not the provider's: hop-by-hop headers and those added by
// proxies on the way in.
var dropHeaders = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-authenticate": true, "proxy-authorization": true,
	"proxy-connection": true, "te": true, "trailer": true, "transfer-encoding": true, "upgrade": true,
	"host": true, "content-length": true, "forwarded": true, "x-forwarded-for": true,
	"x-forwarded-host": true, "x-forwarded-proto": true, "x-forwarded-port": true, "x-real-ip": true,
}

// providerHeaders keeps the provider's headers with their values exactly as
// sent, names lower-cased; repeated headers are joined with ", ".
func providerHeaders(h http.Header) map[string]string {
	out := make(map[string]string, len(h))
	for k, vs := range h {
		lk := strings.ToLower(k)
		if dropHeaders[lk] {
			continue
		}
		out[lk] = strings.Join(vs, ", ")
	}
	return out
}

func newCorrelationID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
