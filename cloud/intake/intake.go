// Package intake is the use case "a provider's request becomes a stored
// delivery": the target a webhook URL names (an active host and its
// enabled source, cached), the handshakes answered in place, the event
// filter, the replay guard, dedupe and the durable insert with its push
// reservation; the quarantine of requests whose source secret does not
// open, and its release; the key checks (the canary, rekey).
//
// It speaks no HTTP: the cloud's edge (cloud/server) reads the request,
// applies the body budget and the rate limit, verifies the signature and
// answers; errors from here are *shared.Error values with one of shared's codes,
// which the edge translates once.
package intake

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/limits"
	"github.com/relaykit/relay/cloud/secrets"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
	"github.com/relaykit/relay/shared/telemetry"
)

// Store is what intake needs of the store.
type Store interface {
	HostGet(ctx context.Context, id string) (*store.Host, error)
	GroupGet(ctx context.Context, id string) (*store.Group, error)
	SourceGet(ctx context.Context, hostID, name string) (*store.Source, error)
	IPSetGet(ctx context.Context, name string) (*store.IPSet, error)
	DeliveryInsert(ctx context.Context, p *store.DeliveryInsertParams) (*store.DeliveryInsertResult, error)
	DeliveryInsertBatch(ctx context.Context, ps []*store.DeliveryInsertParams) ([]*store.DeliveryInsertResult, error)
	DeliveryByDigest(ctx context.Context, p *store.DigestLookupParams) (*store.DigestMatch, error)
	RejectionInsert(ctx context.Context, r *store.Rejection) error
	QuarantineInsert(ctx context.Context, p *store.QuarantineInsertParams) (*store.QuarantinedRequest, error)
	QuarantineList(ctx context.Context, p *store.QuarantineListParams) ([]*store.QuarantinedRequest, error)
	QuarantineGet(ctx context.Context, id int64) (*store.QuarantinedRequest, error)
	QuarantineDelete(ctx context.Context, id int64) error
	IPSetPut(ctx context.Context, p *store.IPSetPutParams) (*store.IPSet, error)
	IPSetFailed(ctx context.Context, p *store.IPSetFailedParams) (*store.IPSet, error)
	CanaryStore
}

// CanaryStore is what the canary check needs of the store.
type CanaryStore interface {
	MetaGet(ctx context.Context, key string) (string, error)
	MetaPut(ctx context.Context, key, value string) error
}

// RekeyStore is what Rekey needs of the store.
type RekeyStore interface {
	CanaryStore
	SourceGet(ctx context.Context, hostID, name string) (*store.Source, error)
	SourceListAll(ctx context.Context) ([]*store.Source, error)
	SourceSetSecrets(ctx context.Context, p *store.SourceSetSecretsParams) error
	AlertSinkList(ctx context.Context) ([]*store.AlertSink, error)
	AlertSinkReseal(ctx context.Context, p *store.AlertSinkResealParams) error
}

// Leaser holds room on a host's live socket on this replica, else on its
// long poll waiting here, for one webhook about to be stored
// (delivery.Intake).
type Leaser interface {
	Reserve(hostID string, size int) *delivery.Reservation
	// Pending: a delivery of the host was stored pending, not leased.
	Pending(hostID string)
}

// Metrics is what intake reports to the cloud's metrics.
type Metrics interface {
	// Count counts one request of provider by outcome (an Outcome*).
	Count(provider, outcome string)
	// QuarantineAdded: one request more is held for its key.
	QuarantineAdded()
	// SetQuarantined sets the number of requests held for their key.
	SetQuarantined(n int)
	// KeysOK says whether a configured key opens the stored secrets.
	KeysOK(ok bool)
}

// Intake outcomes, the values of relay_intake_requests_total's outcome label.
const (
	OutcomeQueued          = "queued"
	OutcomeDuplicate       = "duplicate"
	OutcomeRevived         = "revived"
	OutcomeFiltered        = "filtered"
	OutcomeHandshake       = "handshake"
	OutcomeBadSignature    = "bad_signature"
	OutcomeTooLarge        = "too_large"
	OutcomeRateLimited     = "rate_limited"
	OutcomeOverLimitStored = "over_limit_stored"
	OutcomeQuarantined     = "quarantined"
	OutcomeUnavailable     = "unavailable"
	OutcomeOverBudget      = "over_budget"
	OutcomeIPNotAllowed    = "ip_not_allowed"
	OutcomeNoMembers       = "no_members"
	// A suspected replay held (answered 2xx, not delivered; see holdReplay).
	OutcomeReplayHeld = "replay_held"
)

// Not quarantined, answered 503: no room (in the quarantine or the host's
// share of it), or over the host's quarantine rate.
const (
	OutcomeQuarantineFull        = "quarantine_full"
	OutcomeQuarantineRateLimited = "quarantine_rate_limited"
)

// ErrSecretUnavailable answers a request the quarantine took or had no
// room for; the quarantine logs it, sampled.
var ErrSecretUnavailable = &shared.Error{Code: shared.CodeUnavailable, Message: "source secret unavailable, retry later", Quiet: true}

// ErrReplayNotHeld answers a suspected replay the quarantine had no room
// for: 503, as for a quarantine that is full; holdReplay logs it, sampled.
var ErrReplayNotHeld = &shared.Error{Code: shared.CodeUnavailable, Message: "storage unavailable, retry later", Quiet: true}

// ErrNoMembers answers a webhook to a group with no active members: nothing can
// hold it, so it is not stored and the provider is told to send it again
// later (503), and the request is recorded among the rejections.
var ErrNoMembers = &shared.Error{Code: shared.CodeUnavailable, Message: "the group has no active members: add a host to it"}

// Picker lists the members of a group that may hold a new delivery of its
// any source, first choice first (delivery.Groups).
type Picker interface {
	Pick(groupID string, members []string) []string
}

// Config is the service's dependencies and bounds. All but the bounds and
// IPSetURLs are required.
type Config struct {
	Store   Store
	Ring    *secrets.Ring
	Leaser  Leaser
	Groups  Picker
	Metrics Metrics
	Tracer  *telemetry.Tracer
	Now     func() time.Time
	Log     *slog.Logger
	// TokenKey keys the hashes the quarantine keeps of token headers. It
	// is derived from the JWT key, not from the secret key ring, which is
	// what is broken while requests are quarantined.
	TokenKey func() []byte
	// IPSetURLs overrides where named IP sets are refreshed from, by name.
	IPSetURLs map[string]string
	// IPSetClient fetches the published IP sets (nil: http.DefaultClient).
	IPSetClient *http.Client

	// The quarantine's bounds: in requests and bytes, in all and per host,
	// and requests a minute per host.
	QuarantineMax, QuarantineHostMax           int
	QuarantineMaxBytes, QuarantineHostMaxBytes int64
	QuarantinePerMin                           int
	// MissingTargets bounds the answers kept for unknown hosts and sources
	// (default 10,000).
	MissingTargets int
}

// Service admits providers' requests. It is safe for concurrent use.
type Service struct {
	cfg     Config
	store   Store
	ring    *secrets.Ring
	log     *slog.Logger
	metrics Metrics
	now     func() time.Time
	targets *targetCache
	// audits records rejections per host and minute; quarantineRate admits
	// requests into the quarantine per host and minute, quarantineLog its
	// log lines.
	audits, quarantineRate, quarantineLog *limits.Sampler
}

// New returns a service over cfg.
func New(cfg Config) *Service {
	missing := targetCacheMissing
	if cfg.MissingTargets > 0 {
		missing.entries = cfg.MissingTargets
	}
	return &Service{
		cfg: cfg, store: cfg.Store, ring: cfg.Ring, log: cfg.Log, metrics: cfg.Metrics, now: cfg.Now,
		targets:        newTargetCache(TargetTTL, targetCacheFound, missing),
		audits:         limits.NewSampler(60, 60),
		quarantineRate: limits.NewSampler(cfg.QuarantinePerMin, cfg.QuarantinePerMin),
		quarantineLog:  limits.NewSampler(6, 1),
	}
}
