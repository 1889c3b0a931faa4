package delivery

import (
	"time"

	"github.com/relaykit/relay/cloud/store"
)

// RetryPolicy says when a failed delivery is tried again. Delays[i] is the
// wait before attempt i+1 (Delays[0], before the first attempt, is 0:
// immediate). After MaxAttempts failed attempts the delivery is dead-lettered.
type RetryPolicy struct {
	Delays []time.Duration
}

// DefaultRetryPolicy: immediate, 30 s, 2 min, 10 min, 1 h; five attempts
// (store.DefaultMaxAttempts).
var DefaultRetryPolicy = RetryPolicy{
	Delays: []time.Duration{0, 30 * time.Second, 2 * time.Minute, 10 * time.Minute, time.Hour},
}

// MaxAttempts is how many attempts the policy allows.
func (p RetryPolicy) MaxAttempts() int { return len(p.Delays) }

// OrDefault is p, or DefaultRetryPolicy when p has no delays.
func (p RetryPolicy) OrDefault() RetryPolicy {
	if len(p.Delays) == 0 {
		return DefaultRetryPolicy
	}
	return p
}

// PolicyFor is the retry policy of a delivery whose snapshotted schedule is
// delays: its own when it has one, else fallback (itself defaulting to
// DefaultRetryPolicy).
func PolicyFor(delays []time.Duration, fallback RetryPolicy) RetryPolicy {
	if len(delays) > 0 {
		return RetryPolicy{Delays: delays}
	}
	return fallback.OrDefault()
}

// FailureOutcome decides what follows a failed attempt: attempts is how many
// attempts have been made so far (including the failed one). It returns
// StatusRetrying with the time of the next attempt, or StatusDLQ (next nil)
// when the delivery is out of attempts or the failure is not retryable.
func FailureOutcome(p RetryPolicy, attempts, maxAttempts int, retryable bool, now time.Time) (store.Status, *time.Time) {
	maxAttempts = attemptsAllowed(p, maxAttempts)
	if !retryable || attempts >= maxAttempts {
		return store.StatusDLQ, nil
	}
	delay := time.Duration(0)
	switch {
	case attempts < len(p.Delays):
		delay = p.Delays[attempts]
	case len(p.Delays) > 0:
		delay = p.Delays[len(p.Delays)-1]
	}
	next := now.Add(delay)
	return store.StatusRetrying, &next
}

// attemptsAllowed is a delivery's max_attempts as FailureOutcome reads it:
// its own, or p's when it has none.
func attemptsAllowed(p RetryPolicy, maxAttempts int) int {
	if maxAttempts <= 0 {
		return p.MaxAttempts()
	}
	return maxAttempts
}

// FailureReason is the audit reason of a failed attempt that transition tr
// moved to status to.
func FailureReason(tr store.Transition, to store.Status, retryable bool) string {
	switch {
	case to != store.StatusDLQ:
		return tr.Reason
	case !retryable:
		return tr.Reason + ": not retryable, dead-lettered"
	default:
		return tr.Reason + ": attempts exhausted, dead-lettered"
	}
}

// Fail is the one decision of a failed attempt: tr applied to f, retrying
// or dead-lettered as FailureOutcome says on the delivery's own schedule
// (fallback when it has none), due again at once when tr is AtOnce — the
// handler never ran, there is nothing to back off from; the attempt still
// counts.
func Fail(tr store.Transition, f store.Failing, fallback RetryPolicy, retryable bool, lastError string, now time.Time) store.Failure {
	to, next := FailureOutcome(PolicyFor(f.RetryDelays, fallback), f.Attempts, f.MaxAttempts, retryable, now)
	fl := store.Failure{Transition: tr, To: to, NextRetryAt: next, LastError: lastError,
		Reason: FailureReason(tr, to, retryable)}
	switch {
	case to == store.StatusDLQ:
		fl.DLQAt = &now
	case tr.AtOnce:
		fl.NextRetryAt = &now
	}
	return fl
}

// HandBackCeiling bounds the max_attempts that hand-backs raise a
// delivery to: twice the most a source may set (cloud/server's
// maxSourceAttempts, 50), so that a host handing the same webhook back in
// a loop cannot keep it alive for ever. A hand-back that would raise
// max_attempts past it is an ordinary failure.
const HandBackCeiling = 100

// HandBack is the decision of a nack that hands f back unstarted
// (TransitionHandBack): no handler ran, so it is due again at once, and
// the attempt it spent is given back (max_attempts + 1), so a hand-back
// never dead-letters it. ok is false when that would raise max_attempts
// past HandBackCeiling: the caller fails it as an ordinary nack.
//
// The schedule's next delay is chosen by attempts made, and a hand-back
// still made one: a later real failure waits as after that many attempts
// (one step further along the schedule per hand-back), not as after the
// failed ones alone.
func HandBack(f store.Failing, fallback RetryPolicy, lastError string, now time.Time) (fl store.Failure, ok bool) {
	return handBackAs(store.TransitionHandBack, f, fallback, lastError, now)
}

// handBackAs is HandBack's decision with transition tr: the attempt given
// back, due again at once.
func handBackAs(tr store.Transition, f store.Failing, fallback RetryPolicy, lastError string, now time.Time) (fl store.Failure, ok bool) {
	raised := attemptsAllowed(PolicyFor(f.RetryDelays, fallback), f.MaxAttempts) + 1
	if raised > HandBackCeiling {
		return store.Failure{}, false
	}
	f.MaxAttempts = raised
	fl = Fail(tr, f, fallback, true, lastError, now)
	fl.MaxAttempts = raised
	if fl.To == store.StatusRetrying {
		fl.NextRetryAt = &now
	}
	return fl, true
}

// Nack is one failed attempt reported by a host.
type Nack struct {
	ID        string
	Error     string
	Retryable bool
	Attempt   int // the attempt it reports; 0: the current one
	// NotStarted: the handler never started, the host hands the delivery
	// back (HandBack).
	NotStarted bool
}

// Stale reports whether a nack reports an attempt other than the
// delivery's current one (attempts made so far): such a nack was sent late,
// that attempt already failed by lease expiry, and it changes nothing.
func (n Nack) Stale(attempts int) bool { return n.Attempt > 0 && n.Attempt != attempts }

// NacksByID indexes nacks by delivery id (the last nack of an id wins) and
// lists the distinct ids in their first order.
func NacksByID(nacks []Nack) (ids []string, byID map[string]Nack) {
	byID = make(map[string]Nack, len(nacks))
	ids = make([]string, 0, len(nacks))
	for _, nk := range nacks {
		if _, dup := byID[nk.ID]; !dup {
			ids = append(ids, nk.ID)
		}
		byID[nk.ID] = nk
	}
	return ids, byID
}

// The constructors below build the store's params of failed attempts: the
// engines lock the deliveries and apply what Fail decides, with one update
// guarded on the transition's From.

// NackParams records nacks of the host's leased deliveries
// (TransitionNack): each fails as its nack says, unless it reports an
// attempt already counted (Stale). A nack of a webhook not started hands
// it back (HandBack) while under the ceiling.
func NackParams(hostID string, nacks []Nack, fallback RetryPolicy, now time.Time) *store.DeliveryNackParams {
	ids, byID := NacksByID(nacks)
	tr := store.TransitionNack
	return &store.DeliveryNackParams{HostID: hostID, IDs: ids, Now: now,
		Fail: func(f store.Failing) (store.Failure, bool) {
			nk := byID[f.ID]
			if nk.Stale(f.Attempts) {
				return store.Failure{}, false
			}
			if nk.NotStarted {
				if fl, ok := HandBack(f, fallback, nk.Error, now); ok {
					return fl, true
				}
			}
			return Fail(tr, f, fallback, nk.Retryable, nk.Error, now), true
		}}
}

// ReleaseParams fails the attempt of the host's deliveries among ids whose
// answer was not written (TransitionRelease): due again at once.
func ReleaseParams(hostID string, ids []string, fallback RetryPolicy, now time.Time) *store.DeliveryReleaseParams {
	return &store.DeliveryReleaseParams{HostID: hostID, IDs: ids, Now: now, Fail: atOnce(store.TransitionRelease, fallback, now)}
}

// unclaimedError is the last error of a delivery given back unclaimed.
const unclaimedError = "held for the host's next poll, which did not come in time"

// UnclaimedParams gives back the host's deliveries among ids that were
// stored leased to its parked poll and never handed out (see park.go):
// due again at once, the attempt given back as a hand-back's is, within
// the same ceiling; past it, the attempt counts (TransitionRelease).
func UnclaimedParams(hostID string, ids []string, fallback RetryPolicy, now time.Time) *store.DeliveryReleaseParams {
	return &store.DeliveryReleaseParams{HostID: hostID, IDs: ids, Now: now, Fail: func(f store.Failing) (store.Failure, bool) {
		if fl, ok := handBackAs(store.TransitionRelease, f, fallback, unclaimedError, now); ok {
			return fl, true
		}
		return Fail(store.TransitionRelease, f, fallback, true, unclaimedError, now), true
	}}
}

// ReleaseUnheldParams fails the attempt of the host's leased deliveries not
// in held, after it lost an answer (TransitionAnswerLost): due again at
// once.
func ReleaseUnheldParams(hostID string, held []string, fallback RetryPolicy, now time.Time) *store.DeliveryReleaseUnheldParams {
	return &store.DeliveryReleaseUnheldParams{HostID: hostID, Held: held, Now: now, Fail: atOnce(store.TransitionAnswerLost, fallback, now)}
}

// ConnectionLostParams fails the attempt of the host's leased deliveries
// among ids, pushed on a socket that closed before the host reported them
// (TransitionConnectionLost): due again at once. The engines apply it as
// they apply nacks, under the same lock and guard.
func ConnectionLostParams(hostID string, ids []string, fallback RetryPolicy, now time.Time) *store.DeliveryNackParams {
	return &store.DeliveryNackParams{HostID: hostID, IDs: ids, Now: now, Fail: atOnce(store.TransitionConnectionLost, fallback, now)}
}

// ExpireLeasesParams fails the attempt of up to limit deliveries whose lease
// ended before now: a delivery whose answer was never written (still
// delivering) is due again at once (TransitionExpireUnwritten), one handed
// out follows its schedule (TransitionExpire).
func ExpireLeasesParams(fallback RetryPolicy, limit int, now time.Time) *store.DeliveryExpireLeasesParams {
	return &store.DeliveryExpireLeasesParams{Limit: limit, Now: now,
		Fail: func(f store.Failing) (store.Failure, bool) {
			tr := store.TransitionExpire
			if store.TransitionExpireUnwritten.Allows(f.Status) {
				tr = store.TransitionExpireUnwritten
			}
			return Fail(tr, f, fallback, true, tr.Reason, now), true
		}}
}

// atOnce fails every delivery with tr (an AtOnce transition), its reason as
// the last error.
func atOnce(tr store.Transition, fallback RetryPolicy, now time.Time) store.FailFunc {
	return func(f store.Failing) (store.Failure, bool) {
		return Fail(tr, f, fallback, true, tr.Reason, now), true
	}
}
