package store

import (
	"fmt"
	"time"
)

// Status is a delivery's state.
//
//	queued ──lease──▶ delivering ──written to the host──▶ delivered ──ack──▶ acked
//	delivering ──answer not written, or lease expiry before it was──▶ retrying, due at once
//	delivering/delivered ──handed back unstarted──▶ retrying, due at once, the attempt given back
//	delivering/delivered ──nack or lease expiry──▶ retrying ──lease──▶ delivering …
//	                                           └──▶ dlq (attempts exhausted or not retryable)
//	dlq ──provider repeat──▶ queued (revived, attempts reset)
//	dlq/retrying ──manual retry──▶ queued (attempts reset)
//	acked, dlq ──retention──▶ pruned (deleted with their trail)
//
// The transitions below are the only way a delivery's status changes; every
// engine applies them with an update guarded on the current status and
// records each change in the audit trail.
type Status string

const (
	StatusQueued     Status = "queued"
	StatusDelivering Status = "delivering"
	StatusDelivered  Status = "delivered"
	StatusAcked      Status = "acked"
	StatusRetrying   Status = "retrying"
	StatusDLQ        Status = "dlq"
)

// Statuses lists every status, in lifecycle order.
var Statuses = []Status{StatusQueued, StatusDelivering, StatusDelivered, StatusAcked, StatusRetrying, StatusDLQ}

// ParseStatus validates a status name.
func ParseStatus(s string) (Status, error) {
	for _, st := range Statuses {
		if string(st) == s {
			return st, nil
		}
	}
	return "", fmt.Errorf("unknown status %q", s)
}

// Transition is one guarded state change: it applies only to a delivery whose
// current status is one of From. Engines apply transitions with a single
// update guarded on the current status and record an audit event for each row
// that changed.
type Transition struct {
	From   []Status
	To     Status
	Reason string
	AtOnce bool // a failure due again at once, not after the schedule's delay
}

// Allows reports whether the transition applies to a delivery in status s.
func (t Transition) Allows(s Status) bool {
	for _, f := range t.From {
		if f == s {
			return true
		}
	}
	return false
}

// The transitions of the delivery state machine. Failure transitions
// (nack, lease expiry, release) take their target from the delivery core's
// decision (a FailFunc).
var (
	TransitionReceive = Transition{From: nil, To: StatusQueued, Reason: "received"}
	TransitionRevive  = Transition{From: []Status{StatusDLQ}, To: StatusQueued, Reason: "revived by a repeat from the provider"}
	// A lease says which transport carried the deliveries: a heartbeat's
	// answer (TransitionLease) or the host's socket (TransitionPush); see
	// LeaseOn.
	TransitionLease     = Transition{From: []Status{StatusQueued, StatusRetrying}, To: StatusDelivering, Reason: "leased to a heartbeat"}
	TransitionPush      = Transition{From: []Status{StatusQueued, StatusRetrying}, To: StatusDelivering, Reason: "pushed over the host's socket"}
	TransitionDelivered = Transition{From: []Status{StatusDelivering}, To: StatusDelivered, Reason: "written to the host"}
	// A delivery still delivering did not reach its host: the answer
	// carrying it failed to write (at once), or the cloud stopped before
	// writing it (when the lease ends). The handler never ran, so there is
	// nothing to back off from: it is due again at once. The attempt still
	// counts, so a delivery that can never be handed out (an answer that
	// always fails) ends in the dead-letter queue instead of blocking its
	// host.
	TransitionRelease         = Transition{From: []Status{StatusDelivering}, To: StatusRetrying, Reason: "answer not written", AtOnce: true}
	TransitionExpireUnwritten = Transition{From: []Status{StatusDelivering}, To: StatusRetrying, Reason: "lease expired before its answer was written", AtOnce: true}
	// The host says it lost a heartbeat's answer and does not hold the
	// delivery: the same, for what was leased to it either way.
	TransitionAnswerLost = Transition{From: []Status{StatusDelivering, StatusDelivered}, To: StatusRetrying, Reason: "the host lost the answer carrying it", AtOnce: true}
	// The socket that carried the delivery closed before the host reported
	// it: the same, for what was pushed on that socket.
	TransitionConnectionLost = Transition{From: []Status{StatusDelivering, StatusDelivered}, To: StatusRetrying, Reason: "the socket carrying it closed", AtOnce: true}
	// An ack counts for a delivery that was handed out: under a valid lease,
	// under an expired one (retrying, or dead-lettered by the expiry), and
	// even when it has meanwhile been handed out again: the handler
	// succeeded, and the host's ledger makes the repeat harmless. A queued
	// delivery has not been handed out since it was (re)queued, so an ack of
	// it is stale and changes nothing.
	TransitionAck = Transition{
		From:   []Status{StatusDelivering, StatusDelivered, StatusRetrying, StatusDLQ},
		To:     StatusAcked,
		Reason: "acked by host",
	}
	// A nack only counts for a delivery under lease; a nack that arrives after
	// the lease expired has already been counted as a failed attempt.
	TransitionNack   = Transition{From: []Status{StatusDelivering, StatusDelivered}, To: StatusRetrying, Reason: "nacked by host"}
	TransitionExpire = Transition{From: []Status{StatusDelivering, StatusDelivered}, To: StatusRetrying, Reason: "lease expired"}
	// The host hands back, unstarted, a delivery it holds (it is
	// stopping): no handler ran, so it is due again at once, and the
	// attempt is given back (Failure.MaxAttempts), within the delivery
	// core's ceiling.
	TransitionHandBack = Transition{From: []Status{StatusDelivering, StatusDelivered}, To: StatusRetrying, Reason: "handed back by the host, not started", AtOnce: true}
	// Extending only renews an existing lease.
	TransitionExtend = Transition{From: []Status{StatusDelivering, StatusDelivered}, To: "", Reason: "lease extended"}
	// A manual retry puts a failed delivery back in the queue with its
	// attempts reset, to be handed out on the host's next lease.
	TransitionRetry = Transition{From: []Status{StatusDLQ, StatusRetrying}, To: StatusQueued, Reason: "retried by an operator"}
)

// Via is the transport a lease hands deliveries out on.
type Via string

const (
	ViaHeartbeat Via = "heartbeat" // a heartbeat's answer (a long poll's included)
	ViaSocket    Via = "socket"    // pushed over the host's WebSocket
)

// LeaseOn is the lease transition of deliveries handed out on via: the
// same change of status, its audit reason naming the transport.
func LeaseOn(via Via) Transition {
	if via == ViaSocket {
		return TransitionPush
	}
	return TransitionLease
}

// Requeued lists the transitions that put a delivery back in the queue
// with its attempts reset (RequeueMaxAttempts).
var Requeued = []Transition{TransitionRetry, TransitionRevive}

// RequeueMaxAttempts is the max_attempts a delivery starts again with when
// it is requeued (Requeued): the budget it was stored with. Hand-backs
// since it was last requeued raised max_attempts by one each
// (TransitionHandBack) to give back the attempt they spent; a requeue
// starts the attempts over, so it takes those back too.
func RequeueMaxAttempts(current, handBacks int) int {
	return max(current-handBacks, 0)
}

// PrunableStatuses are the finished states that retention deletes.
var PrunableStatuses = []Status{StatusAcked, StatusDLQ}

// TransitionError says a transition does not apply to a delivery in its
// current status. It matches ErrConflict with errors.Is.
type TransitionError struct {
	DeliveryID string
	Status     Status // the delivery's current status
	Transition Transition
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("%s: delivery %s is %s, want one of %v", e.Transition.Reason, e.DeliveryID, e.Status, e.Transition.From)
}

func (e *TransitionError) Is(target error) bool { return target == ErrConflict }

// Failing is a leased delivery whose attempt failed, as an engine read it
// in the transaction that changes it: what its Failure is decided from.
type Failing struct {
	ID          string
	HostID      string
	Status      Status
	Attempts    int // attempts made so far, the failed one included
	MaxAttempts int
	RetryDelays []time.Duration // the delivery's own schedule; nil: none
	// GroupID and Lane: a group's delivery (Lane "" for an any delivery,
	// which a failure may hand to another member: Failure.MoveTo).
	GroupID, Lane string
}

// HandedOver reports whether f is a group's any delivery: one a failure
// may hand to another member.
func (f Failing) HandedOver() bool { return f.GroupID != "" && f.Lane == "" }

// Failure is what a failed attempt makes of a delivery: decided by the
// delivery core (package delivery), applied by an engine with one update
// guarded on Transition.From, and recorded with Reason in the audit trail.
type Failure struct {
	Transition  Transition // its From guards the update; AtOnce wakes the host's waiting heartbeats
	To          Status     // StatusRetrying or StatusDLQ
	NextRetryAt *time.Time // when retrying
	DLQAt       *time.Time // when dead-lettered
	LastError   string
	Reason      string
	// MaxAttempts, when positive, is the delivery's new max_attempts: a
	// hand-back gives the attempt it spent back to the budget. 0 leaves
	// max_attempts as it is (every other failure).
	MaxAttempts int
	// MoveTo, when set, hands a group's any delivery to that member for
	// its next attempt (To retrying only).
	MoveTo string
}

// FailFunc decides the Failure of a delivery; ok false leaves the delivery
// as it is (a nack of an attempt already counted). Engines call it inside
// their transaction and must not retain it.
type FailFunc func(f Failing) (fl Failure, ok bool)
