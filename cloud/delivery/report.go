package delivery

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/relaykit/relay/cloud/store"
)

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
		p.Nack = s.handover(NackParams(hostID, r.Nacks, s.cfg.Policy, now))
	}
	if len(r.Extends) > 0 {
		p.Extend = &store.DeliveryExtendParams{HostID: hostID, IDs: r.Extends, LeaseFor: s.cfg.LeaseFor, Now: now}
	}
	p.Results = reportedResults(r, now)
	if r.AnswerLost {
		// What its parked poll holds was never handed out: given back,
		// with its attempt, rather than released as lost below.
		s.giveBackParked(hostID, nil)
		// What the lost answer leased, the host does not hold: due again at
		// once, in this very answer if there is room. (Its acks are applied
		// first: acked deliveries are no longer leased.)
		p.ReleaseUnheld = ReleaseUnheldParams(hostID, r.Held, s.cfg.Policy, now)
		p.ReleaseUnheld.Fail = s.cfg.Groups.Handover(p.ReleaseUnheld.Fail, now)
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

// RecordWrite records how the handing out of leased deliveries ended: written
// (nil err), they are delivered (those Writing put off are marked later,
// pollmarks.go; the others now); not written, the attempt failed before
// the handler ran and they are due again at once — a release that fails
// leaves them to the lease expiry, which does the same. It is recorded even
// when ctx was canceled (the host may be gone).
func (s *Service) RecordWrite(ctx context.Context, hostID string, ids []string, err error) {
	if len(ids) == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	if err != nil {
		if m := s.pollMarker(hostID, false); m != nil {
			m.Drop(ids)
		}
		if _, err := s.Release(ctx, hostID, ids); err != nil {
			s.log.Warn("release unwritten deliveries", "host", hostID, "err", err)
		}
		return
	}
	// Decided by what the marker holds, not by whether marks are put off
	// now: that may have changed since Writing.
	now := ids
	if m := s.pollMarker(hostID, false); m != nil {
		now = m.NotPending(ids)
	}
	if len(now) > 0 {
		if _, err := s.MarkDelivered(ctx, hostID, now); err != nil {
			s.log.Warn("mark delivered", "host", hostID, "err", err)
		}
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
	if _, err := s.store.DeliveryNack(context.WithoutCancel(ctx), s.handover(NackParams(hostID, nacks, s.cfg.Policy, s.now()))); err != nil {
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
	p := ReleaseParams(hostID, ids, s.cfg.Policy, s.now())
	p.Fail = s.cfg.Groups.Handover(p.Fail, p.Now)
	n, err := s.store.DeliveryRelease(ctx, p)
	if err != nil {
		return 0, fmt.Errorf("release: %w", err)
	}
	return n, nil
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
	n, err := s.store.DeliveryNack(ctx, s.handover(ConnectionLostParams(hostID, ids, s.cfg.Policy, s.now())))
	if err != nil {
		return 0, fmt.Errorf("connection lost: %w", err)
	}
	if n > 0 {
		s.log.Info("socket closed with deliveries unreported; they are due again", "host", hostID, "deliveries", n)
	}
	return n, nil
}

// handover lets the group router hand a group's any deliveries that fail
// among p to another member (Groups.Handover).
func (s *Service) handover(p *store.DeliveryNackParams) *store.DeliveryNackParams {
	p.Fail = s.cfg.Groups.Handover(p.Fail, p.Now)
	return p
}
