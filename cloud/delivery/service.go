package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared/telemetry"
)

// Store is the storage the core uses (a store.Store has it). Each method
// is store.Store's: errors are store.ErrNotFound for an unknown host
// (HostGet, HostHeartbeat), else the database's.
type Store interface {
	HostGet(ctx context.Context, id string) (*store.Host, error)
	HostHeartbeat(ctx context.Context, p *store.HostHeartbeatParams) error
	DeliveryReport(ctx context.Context, p *store.DeliveryReportParams) (*store.DeliveryReportResult, error)
	DeliveryLease(ctx context.Context, p *store.DeliveryLeaseParams) (*store.DeliveryLeaseResult, error)
	DeliveryMarkDelivered(ctx context.Context, p *store.DeliveryMarkDeliveredParams) (int, error)
	DeliveryRelease(ctx context.Context, p *store.DeliveryReleaseParams) (int, error)
	DeliveryNack(ctx context.Context, p *store.DeliveryNackParams) (int, error)
	DeliveryNextRetryAt(ctx context.Context, hostID string) (*time.Time, error)
	DeliveryListen(ctx context.Context, p *store.DeliveryListenParams) error
	HostStopping(ctx context.Context, hostID string) error
}

// Config sets the core's bounds. Zero values take the defaults.
type Config struct {
	LeaseFor      time.Duration // lease on handed-out deliveries (default 2 min)
	MaxBatchBytes int           // raw body bytes per batch (default 4 MiB)
	MaxWait       time.Duration // longest a wait for work lasts (default 25 s)
	// Policy is the retry schedule of deliveries without their own
	// (default DefaultRetryPolicy).
	Policy RetryPolicy
	// Changed, when set, is called with a host's id after a heartbeat
	// recorded its subscription: what caches of the host must drop.
	Changed func(hostID string)
	// Observer, when set, is told what the core did, for metrics.
	Observer Observer
	// Tracer, when exporting, records a lease span in each leased
	// delivery's trace.
	Tracer *telemetry.Tracer
	// Groups, when set, hands a group's any deliveries whose attempt
	// failed to another member (Groups.Handover).
	Groups *Groups
	// ParkPolls parks answered long polls for their host's next poll
	// (park.go) from the start: where no other replica shares the store.
	// Behind a balancer the next poll may go to another replica, and what
	// a parked poll held would wait out its give-back: replicas sharing a
	// store park while a RollCall finds them alone.
	ParkPolls bool
	// DeferPollMarks puts off the mark of a written long-poll answer for
	// the ack of the host's next poll to record (pollmarks.go) from the
	// start. Only where no other replica shares the store, as ParkPolls,
	// and like it, while a RollCall finds this replica alone.
	DeferPollMarks bool
}

// Observer is told what the core did (the cloud's metrics). Its methods
// must not block.
type Observer interface {
	// Exchanged: a host's heartbeat (or any transport's exchange) was served.
	Exchanged(hostID string)
	// Leased: deliveries were leased to a host, each with its attempt.
	Leased(ds []*store.Delivery)
	// Acked: the host acked these deliveries at now (late repeats included).
	Acked(ids []string, now time.Time)
}

func (c *Config) setDefaults() {
	if c.LeaseFor <= 0 {
		c.LeaseFor = 2 * time.Minute
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = 4 << 20
	}
	if c.MaxWait <= 0 {
		c.MaxWait = 25 * time.Second
	}
	c.Policy = c.Policy.OrDefault()
}

// Service is the delivery core. Its methods are safe for concurrent use.
type Service struct {
	store   Store
	cfg     Config
	clock   clockwork.Clock
	log     *slog.Logger
	wakeups *wakeups
	marks   pollMarks
	// parkPolls: answered long polls park; deferMarks: the marks of their
	// answers wait for the host's next poll (Config.ParkPolls,
	// DeferPollMarks, or a RollCall's finding: setAlone).
	parkPolls, deferMarks atomic.Bool
}

// New returns the core over st.
func New(st Store, cfg Config, clock clockwork.Clock, log *slog.Logger) *Service {
	cfg.setDefaults()
	s := &Service{store: st, cfg: cfg, clock: clock, log: log, wakeups: newWakeups()}
	s.parkPolls.Store(cfg.ParkPolls)
	s.deferMarks.Store(cfg.DeferPollMarks)
	return s
}

// now is the clock's time at the precision both stores keep.
func (s *Service) now() time.Time { return s.clock.Now().UTC().Truncate(time.Millisecond) }

// Policy is the retry schedule of deliveries without their own.
func (s *Service) Policy() RetryPolicy { return s.cfg.Policy }

// Now is the cloud's time as the core records it: what a host is told is
// the time, whatever its own clock says.
func (s *Service) Now() time.Time { return s.now() }

// LeaseFor is how long a lease granted or extended lasts.
func (s *Service) LeaseFor() time.Duration { return s.cfg.LeaseFor }

// Beat is what a heartbeat says of the host itself.
type Beat struct {
	AgentVersion string
	Subscription json.RawMessage // nil: unchanged
}

// recordEvery is how often a host's last heartbeat is written when
// nothing else about it changed: a host draining a backlog heartbeats
// back to back, and a commit for each would only move a timestamp by
// milliseconds.
const recordEvery = time.Second

// Record records that host is alive, with its agent version and
// subscription, when that changes the stored host (see recordEvery).
func (s *Service) Record(ctx context.Context, host *store.Host, b Beat) error {
	p := &store.HostHeartbeatParams{HostID: host.ID, AgentVersion: b.AgentVersion, Subscription: b.Subscription, Now: s.now()}
	if !needsRecording(host, p) {
		return nil
	}
	err := s.store.HostHeartbeat(ctx, p)
	if p.Subscription != nil && s.cfg.Changed != nil {
		s.cfg.Changed(host.ID) // e.g. intake filters by the subscription
	}
	if err != nil {
		return fmt.Errorf("record heartbeat: %w", err)
	}
	return nil
}

// needsRecording says whether a heartbeat changes the stored host: a new
// subscription or agent version, or the last one recorded a while ago.
func needsRecording(h *store.Host, hb *store.HostHeartbeatParams) bool {
	return hb.Subscription != nil || hb.AgentVersion != h.AgentVersion || h.LastHeartbeatAt == nil ||
		hb.Now.Sub(*h.LastHeartbeatAt) >= recordEvery
}

// Heartbeat is one heartbeat of a host: its report, what it says of
// itself, and how much it takes.
type Heartbeat struct {
	Report
	Beat
	Max  int           // at most this many deliveries; 0: none
	Wait time.Duration // wait this long for work when none is available (at most MaxWait)
}

// Heartbeat is the use case of a heartbeat: apply the host's report, record
// that it is alive, and lease its next batch, waiting for work when asked.
// The caller hands the batch out and then says how that ended (RecordWrite).
// Errors are the store's, wrapped: the heartbeat may be retried.
func (s *Service) Heartbeat(ctx context.Context, host *store.Host, hb *Heartbeat) (*store.DeliveryLeaseResult, error) {
	if s.cfg.Observer != nil {
		s.cfg.Observer.Exchanged(host.ID)
	}
	restore := s.takeMarks(host.ID, &hb.Report)
	if _, err := s.Report(ctx, host.ID, &hb.Report); err != nil {
		restore()
		return nil, err
	}
	if err := s.Record(ctx, host, hb.Beat); err != nil {
		return nil, err
	}
	if hb.HostStops() {
		s.HostStopping(ctx, host.ID)
	}
	return s.Lease(ctx, host, hb.Max, hb.Wait)
}

// Errors of NextPush.
var (
	// ErrHostGone: the host was deactivated or re-claimed (its generation
	// moved on); its connection must close.
	ErrHostGone = errors.New("host deactivated or re-claimed")
	// ErrStopping: the service stops waiting (StopWaiting); connections
	// close so that hosts go to another replica.
	ErrStopping = errors.New("cloud stopping")
)
