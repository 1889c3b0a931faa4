package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/otel/attribute"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
	"github.com/relaykit/relay/shared/steptime"
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
}

// New returns the core over st.
func New(st Store, cfg Config, clock clockwork.Clock, log *slog.Logger) *Service {
	cfg.setDefaults()
	return &Service{store: st, cfg: cfg, clock: clock, log: log, wakeups: newWakeups()}
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

// Report is what a host says of the deliveries it was handed.
type Report struct {
	Acks    []string // handled
	Nacks   []Nack   // failed
	Extends []string // still running: renew their lease
	// AnswerLost: the host lost an answer and holds only Held of what is
	// leased to it; the rest is due again at once.
	AnswerLost bool
	Held       []string
	// Results are what the host's ledger recorded of the runs it acks or
	// nacks here (the others are dropped); ReportedAt is set by Report.
	Results []store.DeliveryResult
	// Stopping: the host says it is stopping (HostStops).
	Stopping bool
	// Unmarked: deliveries among Acks written to the host whose mark as
	// delivered was put off and not yet made (Marker.Take); the ack records
	// them delivered, then acked.
	Unmarked []store.Written
}

// HostStops says whether the report says its host is stopping: in so many
// words, or by handing a delivery back unstarted (a nack NotStarted). A
// stopping host is leased nothing more on the transport it reports on: its
// long polls answer at once (Service.HostStopping), its socket pushes no
// more (Outbox.HandingBack).
func (r *Report) HostStops() bool {
	if r.Stopping {
		return true
	}
	for _, nk := range r.Nacks {
		if nk.NotStarted {
			return true
		}
	}
	return false
}

func (r *Report) empty() bool {
	return len(r.Acks) == 0 && len(r.Nacks) == 0 && len(r.Extends) == 0 && !r.AnswerLost
}

// Report applies a host's report in one store transaction: acks, nacks,
// extends, then the release of what a lost answer leased. It returns the
// store's error, wrapped.
func (s *Service) Report(ctx context.Context, hostID string, r *Report) (*store.DeliveryReportResult, error) {
	if r.empty() {
		return &store.DeliveryReportResult{}, nil
	}
	now := s.now()
	p := &store.DeliveryReportParams{HostID: hostID}
	if len(r.Acks) > 0 {
		p.Ack = &store.DeliveryAckParams{HostID: hostID, IDs: r.Acks, Written: r.Unmarked, Now: now}
	}
	if len(r.Nacks) > 0 {
		p.Nack = NackParams(hostID, r.Nacks, s.cfg.Policy, now)
	}
	if len(r.Extends) > 0 {
		p.Extend = &store.DeliveryExtendParams{HostID: hostID, IDs: r.Extends, LeaseFor: s.cfg.LeaseFor, Now: now}
	}
	p.Results = reportedResults(r, now)
	if r.AnswerLost {
		// What the lost answer leased, the host does not hold: due again at
		// once, in this very answer if there is room. (Its acks are applied
		// first: acked deliveries are no longer leased.)
		p.ReleaseUnheld = ReleaseUnheldParams(hostID, r.Held, s.cfg.Policy, now)
	}
	res, err := s.store.DeliveryReport(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	if s.cfg.Observer != nil && res.Acked > 0 {
		s.cfg.Observer.Acked(r.Acks, now)
	}
	if res.Released > 0 {
		s.log.Info("host lost a heartbeat answer; its deliveries are due again", "host", hostID, "deliveries", res.Released)
	}
	return res, nil
}

// reportedResults keeps the results of the runs the report acks or nacks,
// one per delivery (the last), valid ones only, stamped now.
func reportedResults(r *Report, now time.Time) []store.DeliveryResult {
	if len(r.Results) == 0 {
		return nil
	}
	reported := make(map[string]bool, len(r.Acks)+len(r.Nacks))
	for _, id := range r.Acks {
		reported[id] = true
	}
	for _, n := range r.Nacks {
		reported[n.ID] = true
	}
	byID := make(map[string]int, len(r.Results))
	var out []store.DeliveryResult
	for _, res := range r.Results {
		if !reported[res.DeliveryID] || !store.ResultValid(res.Result) {
			continue
		}
		res.ReportedAt = now
		if i, ok := byID[res.DeliveryID]; ok {
			out[i] = res
			continue
		}
		byID[res.DeliveryID] = len(out)
		out = append(out, res)
	}
	return out
}

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

// Lease leases the host's available deliveries, at most max of them and
// the configured bytes of body, oldest first. When none is available and
// wait is positive, it waits up to wait (at most MaxWait) for work: a
// delivery arriving for the host, or its earliest retry coming due. A
// caller whose ctx ends while it waits gets nothing leased; so does a host
// deactivated or re-claimed meanwhile (its generation moved on).
func (s *Service) Lease(ctx context.Context, host *store.Host, max int, wait time.Duration) (*store.DeliveryLeaseResult, error) {
	if max <= 0 {
		return &store.DeliveryLeaseResult{}, nil
	}
	// A host that asks to wait is listening before it looks, so that work
	// arriving in between still wakes it.
	var wake <-chan struct{}
	var pl *poll
	wait = min(wait, s.cfg.MaxWait)
	if wait > 0 {
		ch, unsubscribe := s.Subscribe(host.ID)
		defer unsubscribe()
		wake = ch
		// While it waits having found nothing, the intake may store a
		// webhook leased to it (see poll).
		pl = newPoll(max, s.cfg.MaxBatchBytes, ch)
		defer s.wakeups.watch(host.ID, pl)()
	}
	p := &store.DeliveryLeaseParams{HostID: host.ID, Via: store.ViaHeartbeat, Max: max, MaxBytes: s.cfg.MaxBatchBytes, LeaseFor: s.cfg.LeaseFor, Now: s.now()}
	began := steptime.Now()
	res, err := s.store.DeliveryLease(ctx, p)
	if err == nil {
		stamp(time.Time{}, time.Time{}, began, res.Deliveries)
	}
	if err == nil && len(res.Deliveries) == 0 && wake != nil {
		res, err = s.await(ctx, p, host.Generation, wait, pl)
	}
	if err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	s.observeLeased(ctx, host.ID, res.Deliveries)
	return res, nil
}

// observeLeased tells the observer and the tracer of a leased batch, for
// any transport.
func (s *Service) observeLeased(ctx context.Context, hostID string, ds []*store.Delivery) {
	if s.cfg.Observer != nil && len(ds) > 0 {
		s.cfg.Observer.Leased(ds)
	}
	if s.cfg.Tracer.Enabled() {
		for _, d := range ds {
			_, span, _ := s.cfg.Tracer.Start(ctx, "lease", d.Headers[shared.HeaderTraceParent],
				attribute.String("relay.delivery_id", d.ID), attribute.String("relay.host_id", hostID),
				attribute.Int("relay.attempt", d.Attempts))
			span.End()
		}
	}
}

// await holds a lease that found nothing until the host has work, up to
// wait: it wakes when a delivery arrives for the host (its poll's
// subscription) and when its earliest retry comes due, then leases again.
// Meanwhile the intake may store deliveries leased to it (pl): once those
// settled they are its answer, with no lease. When ctx ends (the host is
// gone) or the host was deactivated, what was handed to it is released, due
// again at once (Release: its answer was never written).
func (s *Service) await(ctx context.Context, p *store.DeliveryLeaseParams, generation int64, wait time.Duration, pl *poll) (*store.DeliveryLeaseResult, error) {
	deadline := p.Now.Add(wait)
	due, err := s.store.DeliveryNextRetryAt(ctx, p.HostID)
	if err != nil {
		return nil, err
	}
	if due != nil && due.Before(deadline) {
		deadline = *due
	}
	t := s.clock.NewTimer(deadline.Sub(p.Now))
	defer t.Stop()
	for {
		final, woken, ended := false, false, false
		var notifiedAt, wokenAt time.Time // steptime
		pl.setOpen()
		select {
		case <-ctx.Done():
		case <-s.wakeups.stop:
			final = true
		case <-t.Chan():
			final = true
		case <-pl.ended:
			ended = true
		case <-pl.ready:
		case <-pl.wake:
			woken = true
			notifiedAt, wokenAt = s.wakeups.notifiedAt(p.HostID), steptime.Now()
		}
		handed := pl.close()
		if ctx.Err() != nil {
			s.releaseHanded(ctx, p.HostID, handed)
			return &store.DeliveryLeaseResult{}, nil
		}
		if len(handed) > 0 && !woken {
			return &store.DeliveryLeaseResult{Deliveries: handed}, nil
		}
		h, err := s.store.HostGet(ctx, p.HostID)
		if err == nil && (h.Status != store.HostActive || h.Generation != generation) {
			s.releaseHanded(ctx, p.HostID, handed)
			return &store.DeliveryLeaseResult{}, nil
		}
		if len(handed) > 0 {
			// A failed look at the host leaves them to its answer all the
			// same: they were leased to it while it was active.
			return &store.DeliveryLeaseResult{Deliveries: handed}, nil
		}
		if ended {
			// Its host is stopping and reads this answer: nothing more.
			return &store.DeliveryLeaseResult{}, nil
		}
		if err != nil {
			return nil, err
		}
		p.Now = s.now()
		began := steptime.Now()
		res, err := s.store.DeliveryLease(ctx, p)
		if err == nil {
			stamp(notifiedAt, wokenAt, began, res.Deliveries)
		}
		if err != nil || final || len(res.Deliveries) > 0 {
			return res, err
		}
	}
}

// releaseHanded releases deliveries stored leased to a poll that will not
// answer with them: never written, due again at once (Release), whether or
// not ctx was canceled. A release that fails leaves them to their lease's
// expiry, which does the same.
func (s *Service) releaseHanded(ctx context.Context, hostID string, ds []*store.Delivery) {
	if len(ds) == 0 {
		return
	}
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
	}
	if _, err := s.Release(context.WithoutCancel(ctx), hostID, ids); err != nil {
		s.log.Warn("release deliveries of an ended poll", "host", hostID, "err", err)
	}
}

// RecordWrite records how the handing out of leased deliveries ended: written
// (nil err), they are delivered; not written, the attempt failed before
// the handler ran and they are due again at once — a release that fails
// leaves them to the lease expiry, which does the same. It is recorded even
// when ctx was canceled (the host may be gone).
func (s *Service) RecordWrite(ctx context.Context, hostID string, ids []string, err error) {
	if len(ids) == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	if err != nil {
		if _, err := s.Release(ctx, hostID, ids); err != nil {
			s.log.Warn("release unwritten deliveries", "host", hostID, "err", err)
		}
		return
	}
	if _, err := s.MarkDelivered(ctx, hostID, ids); err != nil {
		s.log.Warn("mark delivered", "host", hostID, "err", err)
	}
	s.log.LogAttrs(ctx, slog.LevelDebug, "leased", slog.String("host", hostID), slog.Int("count", len(ids)))
}

// HandBackUnpushed gives back deliveries leased to a connection whose host
// handed back what it held before they could be written to it: the host is
// stopping and starts nothing more, so no handler ran. As a hand-back
// (TransitionHandBack) they are due again at once and keep their attempt;
// written, they would have reached a host that no longer reports, and its
// closing socket would have spent one. It is recorded even when ctx was
// canceled.
func (s *Service) HandBackUnpushed(ctx context.Context, hostID string, ids []string) {
	if len(ids) == 0 {
		return
	}
	nacks := make([]Nack, len(ids))
	for i, id := range ids {
		nacks[i] = Nack{ID: id, Error: "host stopping: not pushed", Retryable: true, NotStarted: true}
	}
	if _, err := s.store.DeliveryNack(context.WithoutCancel(ctx), NackParams(hostID, nacks, s.cfg.Policy, s.now())); err != nil {
		s.log.Warn("hand back deliveries not pushed to a stopping host; their leases will end", "host", hostID,
			"deliveries", len(ids), "err", err)
	}
}

// MarkDelivered moves leased deliveries on to delivered: what carried them
// reached the host. It returns how many changed.
func (s *Service) MarkDelivered(ctx context.Context, hostID string, ids []string) (int, error) {
	n, err := s.store.DeliveryMarkDelivered(ctx, &store.DeliveryMarkDeliveredParams{HostID: hostID, IDs: ids, Now: s.now()})
	if err != nil {
		return 0, fmt.Errorf("mark delivered: %w", err)
	}
	return n, nil
}

// Release fails the attempt of leased deliveries that never reached the
// host: due again at once (TransitionRelease). It returns how many changed.
func (s *Service) Release(ctx context.Context, hostID string, ids []string) (int, error) {
	n, err := s.store.DeliveryRelease(ctx, ReleaseParams(hostID, ids, s.cfg.Policy, s.now()))
	if err != nil {
		return 0, fmt.Errorf("release: %w", err)
	}
	return n, nil
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
	if _, err := s.Report(ctx, host.ID, &hb.Report); err != nil {
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

// ConnectionLost fails the attempt of deliveries pushed on a connection
// that closed before the host reported them (TransitionConnectionLost): due
// again at once, for the host's next connection or heartbeat. Deliveries the host
// reported meanwhile, or that are no longer leased, are left alone. It is
// recorded even when ctx was canceled (the connection is gone), and returns
// how many changed.
func (s *Service) ConnectionLost(ctx context.Context, hostID string, ids []string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	ctx = context.WithoutCancel(ctx)
	n, err := s.store.DeliveryNack(ctx, ConnectionLostParams(hostID, ids, s.cfg.Policy, s.now()))
	if err != nil {
		return 0, fmt.Errorf("connection lost: %w", err)
	}
	if n > 0 {
		s.log.Info("socket closed with deliveries unreported; they are due again", "host", hostID, "deliveries", n)
	}
	return n, nil
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

// NextPush returns the next batch of a connection that pushes deliveries as
// they come: first what the intake leased to it as it was stored (see
// Outbox), else at most the outbox's room of the host's available
// deliveries (none while it is 0), leased oldest first, waiting as long as
// ctx lasts for work — a delivery arriving for the host or handed in, its
// earliest retry coming due, or more room (the outbox's poke: room may
// have grown, or a report moved a retry). Unlike a heartbeat's wait, an
// idle connection costs no query until one of those happens. It returns
// ErrHostGone when the host was deactivated or re-claimed meanwhile,
// ErrStopping once the service stops waiting, ctx's error when it ends,
// else the store's, wrapped.
func (s *Service) NextPush(ctx context.Context, host *store.Host, o *Outbox) (*store.DeliveryLeaseResult, error) {
	st := &o.loop
	// woken: a wake-up, or the first look — a host that changed before
	// the subscription is caught there — so the host is looked at too
	// when there is nothing to lease.
	woken := st.wake == nil
	if st.wake == nil {
		// Listening before looking: work arriving in between still wakes
		// it. The subscription lasts from call to call (until one ends in
		// an error, or the outbox closes): a wake-up while the caller
		// pushes is not lost, and a loop caught up need not look again.
		wake, unsubscribe := s.Subscribe(host.ID)
		st.wake = wake
		o.subscribed(wake, unsubscribe)
	}
	caughtUp := func(v bool) {
		st.caughtUp = v
		o.setCaughtUp(v)
	}
	end := func() {
		if st.retry != nil {
			st.retry.Stop()
		}
		*st = loopState{}
		o.unsubscribe()
	}
	// Lease, and find the next retry, before waiting — unless the last
	// look found nothing and nothing woke the loop since (st.caughtUp;
	// only then may the intake lease to it).
	look := woken || !st.caughtUp || o.takeRelook()
	if look {
		// A poke before the look is answered by it.
		select {
		case <-o.poke:
		default:
		}
		o.takeRelook()
	}
	var notifiedAt, wokenAt time.Time // the last wake-up's (steptime)
	for {
		if err := ctx.Err(); err != nil {
			// What was handed in stays: the connection's release takes it.
			end()
			return nil, err
		}
		if ds := o.take(); len(ds) > 0 {
			// Leased as they were stored: no lease here.
			if s.cfg.Observer != nil {
				s.cfg.Observer.Exchanged(host.ID)
			}
			s.observeLeased(ctx, host.ID, ds)
			return &store.DeliveryLeaseResult{Deliveries: ds}, nil
		}
		if n := o.Room(); n > 0 && look {
			p := &store.DeliveryLeaseParams{HostID: host.ID, Via: store.ViaSocket, Max: n, MaxBytes: s.cfg.MaxBatchBytes, LeaseFor: s.cfg.LeaseFor, Now: s.now()}
			began := steptime.Now()
			res, err := s.store.DeliveryLease(ctx, p)
			if err != nil {
				end()
				return nil, fmt.Errorf("lease: %w", err)
			}
			if len(res.Deliveries) > 0 {
				caughtUp(false) // there may be more: the next call looks
				o.took(len(res.Deliveries))
				// Each push is an exchange with the host, as a heartbeat is.
				if s.cfg.Observer != nil {
					s.cfg.Observer.Exchanged(host.ID)
				}
				s.observeLeased(ctx, host.ID, res.Deliveries)
				stamp(notifiedAt, wokenAt, began, res.Deliveries)
				return res, nil
			}
			caughtUp(true)
			next, err := s.store.DeliveryNextRetryAt(ctx, host.ID)
			if err != nil {
				end()
				return nil, fmt.Errorf("next retry: %w", err)
			}
			if st.retry != nil {
				st.retry.Stop()
				st.retry = nil
			}
			if next != nil {
				st.retry = s.clock.NewTimer(max(next.Sub(p.Now), time.Millisecond))
			}
		}
		if woken {
			// Nothing to push (or no room): the wake-up may say the host
			// is gone.
			if err := s.stillActive(ctx, host); err != nil {
				end()
				return nil, err
			}
		}
		look, woken = false, false
		var due <-chan time.Time
		if st.retry != nil {
			due = st.retry.Chan()
		}
		o.waiting(true)
		select {
		case <-ctx.Done():
			o.waiting(false)
			end()
			return nil, ctx.Err()
		case <-s.wakeups.stop:
			o.waiting(false)
			end()
			return nil, ErrStopping
		case <-o.poke:
			// More room, or something handed in (taken above), finds
			// nothing new to lease when the last look found nothing and
			// nothing woke the loop since; a Poke does.
			look = o.takeRelook() || !st.caughtUp
			notifiedAt, wokenAt = time.Time{}, time.Time{}
		case <-due:
			st.retry = nil
			look = true
			caughtUp(false)
			notifiedAt, wokenAt = time.Time{}, time.Time{}
		case <-st.wake:
			look, woken = true, true
			caughtUp(false)
			notifiedAt, wokenAt = s.wakeups.notifiedAt(host.ID), steptime.Now()
		}
		o.waiting(false)
	}
}

// stillActive returns ErrHostGone when host was deactivated or re-claimed.
func (s *Service) stillActive(ctx context.Context, host *store.Host) error {
	h, err := s.store.HostGet(ctx, host.ID)
	if errors.Is(err, store.ErrNotFound) {
		return ErrHostGone
	}
	if err != nil {
		return fmt.Errorf("host: %w", err)
	}
	if h.Status != store.HostActive || h.Generation != host.Generation {
		return ErrHostGone
	}
	return nil
}

// NewOutbox returns the outbox of a new connection, with no room until its
// host grants some.
func (s *Service) NewOutbox() *Outbox {
	o := &Outbox{leaseFor: s.cfg.LeaseFor, poke: make(chan struct{}, 1)}
	o.held = newRoom(&o.mu, s.cfg.MaxBatchBytes)
	return o
}

// NewMarker returns the marker of a connection of host.
func (s *Service) NewMarker(hostID string) *Marker {
	m := &Marker{s: s, hostID: hostID, pending: map[string]time.Time{}}
	m.cond = sync.NewCond(&m.mu)
	return m
}

// HostStopping answers at once the host's long polls, with what was
// already leased to them and nothing more: the host is stopping, and reads
// their answers to hand back what they carry, where hanging up on them
// would cost their deliveries an attempt no handler used. Those on this
// replica end now, those on others when the store's listener tells them
// (store.HostStopping); one whose replica does not hear of it answers as
// ever, when work arrives or its wait ends.
func (s *Service) HostStopping(ctx context.Context, hostID string) {
	s.endPolls(hostID)
	if err := s.store.HostStopping(context.WithoutCancel(ctx), hostID); err != nil {
		s.log.Warn("tell other replicas a host is stopping", "host", hostID, "err", err)
	}
}

// endPolls answers the host's long polls waiting on this replica at once.
func (s *Service) endPolls(hostID string) { s.eachPoll(hostID, (*poll).end) }

// eachPoll calls fn on each of hostID's polls waiting on this replica.
func (s *Service) eachPoll(hostID string, fn func(*poll)) {
	w := s.wakeups
	w.mu.Lock()
	defer w.mu.Unlock()
	for p := range w.polls[hostID] {
		fn(p)
	}
}

// reservePoll holds room for one delivery of hostID, of size body bytes,
// on one of its long polls waiting on this replica with nothing found; nil
// when there is none or the service stops waiting.
func (s *Service) reservePoll(hostID string, size int) *Reservation {
	w := s.wakeups
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return nil
	}
	for p := range w.polls[hostID] {
		if v := p.reserve(s.cfg.LeaseFor, size); v != nil {
			return v
		}
	}
	return nil
}

// pendingPolls tells hostID's polls waiting here that a delivery of the
// host was stored pending.
func (s *Service) pendingPolls(hostID string) { s.eachPoll(hostID, (*poll).pending) }

// Subscribe returns a channel that receives when the host may have work
// (deliveries became available to it at once) or the host changed, and its
// cancel. A receive
// is a hint: look with Lease. The channel holds one wake-up; more while it
// is full are merged.
func (s *Service) Subscribe(hostID string) (<-chan struct{}, func()) {
	w := s.wakeups
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiting[hostID] == nil {
		w.waiting[hostID] = map[chan struct{}]bool{}
	}
	w.waiting[hostID][ch] = true
	return ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.waiting[hostID], ch)
		if len(w.waiting[hostID]) == 0 {
			delete(w.waiting, hostID)
		}
	}
}

// Waiting is how many subscriptions are open, over every host.
func (s *Service) Waiting() int {
	s.wakeups.mu.Lock()
	defer s.wakeups.mu.Unlock()
	n := 0
	for _, chs := range s.wakeups.waiting {
		n += len(chs)
	}
	return n
}

// StopWaiting ends every wait at once, and every later one without
// waiting: for a graceful shutdown. Stopping is what Stopping's channel
// says.
func (s *Service) StopWaiting() {
	s.wakeups.mu.Lock()
	defer s.wakeups.mu.Unlock()
	if !s.wakeups.stopped {
		s.wakeups.stopped = true
		close(s.wakeups.stop)
	}
}

// Stopping is closed once StopWaiting was called.
func (s *Service) Stopping() <-chan struct{} { return s.wakeups.stop }

// Ready is closed once the store's listener first listens (Listen).
func (s *Service) Ready() <-chan struct{} { return s.wakeups.ready }

// OnSocket sets what Listen tells of hosts' sockets opening and closing in
// any replica (Connections.Observe). Call it before Listen.
func (s *Service) OnSocket(fn func(store.SocketEvent)) { s.wakeups.socket = fn }

// OnIPSetChanged sets what Listen tells of named IP sets stored anew in any
// replica (store.DeliveryListenParams.IPSetChanged). Call it before Listen.
func (s *Service) OnIPSetChanged(fn func(name string)) { s.wakeups.ipSetChanged = fn }

// Listen feeds subscribers from the store's listener until ctx ends,
// listening again a second after a failure. listening, when set, is called
// each time the listener is in place (changes made while no one listened
// went untold); changed, when set, with the id of a host whose settings
// changed (store.DeliveryListenParams.Changed).
func (s *Service) Listen(ctx context.Context, listening func(), changed func(hostID string)) {
	for {
		err := s.store.DeliveryListen(ctx, &store.DeliveryListenParams{
			Listening: func() {
				if listening != nil {
					listening()
				}
				s.wakeups.once.Do(func() { close(s.wakeups.ready) })
			},
			Available:    s.wakeups.wake,
			Socket:       s.wakeups.socket,
			IPSetChanged: s.wakeups.ipSetChanged,
			// A host that is stopping has its polls answered, on every
			// replica (HostStopping).
			Stopping: s.endPolls,
			// A host that changed (deactivated, re-claimed) wakes its
			// subscribers too: a pushing connection looks at the host
			// again and closes if it is gone.
			Changed: func(hostID string) {
				if changed != nil {
					changed(hostID)
				}
				s.wakeups.wake(hostID)
			},
		})
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("delivery listener failed; waiting heartbeats fall back to their timeout", "err", err)
		t := s.clock.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.Chan():
		}
	}
}
