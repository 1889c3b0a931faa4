package delivery

import (
	"fmt"
	"strings"
	"time"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

// Advise decides what an operator can do about a delivery, and why, from
// the cloud's record (d and its audit trail evs) and the result its host's
// ledger reported (r, nil when none): the next_action of the admin API's
// delivery, `cloud ctl inspect` and the console's delivery page. A handler
// the ledger records as done must not run again by hand, whatever the
// cloud says, and one that may have run is not called retry-safe.
func Advise(d *store.Delivery, evs []*store.DeliveryEvent, r *store.DeliveryResult, now time.Time) shared.NextAction {
	failure := LastFailure(evs)
	done := r != nil && (r.Result == "success" || r.Result == "skipped")
	ledger := "the host has reported no run"
	if r != nil {
		ledger = fmt.Sprintf("the host's ledger records %s at attempt %d (%s)", r.Result, r.Attempt, shared.Stamp(&r.ReportedAt))
		if r.Error != "" {
			ledger += ": " + cut(r.Error, 120)
		}
	}
	retryCmd := "cloud ctl deliveries retry " + d.ID
	replayCmd := "cloud ctl deliveries replay " + d.ID
	if d.Status == store.StatusAcked && r != nil && r.Result == "skipped" {
		return shared.NextAction{RetrySafe: true, Action: "replay", Why: "acked " + sinceP(now, d.AckedAt) + ", but " + ledger +
			": no handler ran. Its body is kept until retention prunes it: fix the host's configuration, then `" + replayCmd + "` (add --to HOST for another host)."}
	}
	if d.Status == store.StatusAcked {
		return shared.NextAction{RetrySafe: false, Action: "none", Why: "acked " + sinceP(now, d.AckedAt) + "; " + ledger +
			". Nothing to do (to run it again on purpose: `" + replayCmd + "`)."}
	}
	if done && d.Status == store.StatusDLQ {
		return shared.NextAction{RetrySafe: false, Action: "ack",
			Why: "dead-lettered, yet " + ledger + ": the side effect is done. Do not retry; run `host reconcile --fix` on host " + d.HostID + " to send the missing ack."}
	}
	if done {
		return shared.NextAction{RetrySafe: false, Action: "wait",
			Why: string(d.Status) + " in the cloud, but " + ledger + ": the side effect is done and the ack is still to come (the host's next report sends it, over its socket or with a heartbeat). Do not retry by hand; if it stays, run `host reconcile` on host " + d.HostID + "."}
	}
	if r == nil && mayHaveRun(failure) && (d.Status == store.StatusRetrying || d.Status == store.StatusDLQ) {
		ended := "its lease ended"
		if strings.HasPrefix(failure, store.TransitionConnectionLost.Reason) {
			ended = "the socket carrying it closed"
		}
		unknown := ended + " while host " + d.HostID + " held it and the host reported no result: whether the handler ran is unknown. "
		if d.Status == store.StatusDLQ {
			return shared.NextAction{RetrySafe: false, Action: "investigate",
				Why: "dead-lettered: " + unknown + "Run `host reconcile` on the host: if its ledger records success, `--fix` sends the ack; if not, `" + retryCmd + "`."}
		}
		return shared.NextAction{RetrySafe: false, Action: "wait",
			Why: "retrying: " + unknown + "The next attempt (" + sinceP(now, d.NextRetryAt) + ") goes to the same host, whose ledger runs it only if it did not succeed; `host reconcile` there tells which."}
	}
	if r == nil {
		ledger += " (the cloud's record: " + shared.OrDash(failure) + ")"
	}
	switch d.Status {
	case store.StatusDLQ:
		return shared.NextAction{RetrySafe: true, Action: "retry",
			Why: fmt.Sprintf("dead-lettered after %d attempts (%s); %s, side effect not committed. Fix the cause, then `%s`.", d.Attempts, shared.OrDash(cut(d.LastError, 120)), ledger, retryCmd)}
	case store.StatusRetrying:
		cause := "the handler failed (" + shared.OrDash(cut(d.LastError, 120)) + ")"
		if r == nil && !strings.HasPrefix(failure, store.TransitionNack.Reason) {
			cause = "it did not reach the host's handler (" + shared.OrDash(failure) + ")"
		}
		return shared.NextAction{RetrySafe: true, Action: "wait",
			Why: fmt.Sprintf("%s; %s, side effect not committed. Next attempt %s (attempt %d of %d), or now with `%s`.",
				cause, ledger, sinceP(now, d.NextRetryAt), d.Attempts+1, d.MaxAttempts, retryCmd)}
	case store.StatusDelivering, store.StatusDelivered:
		if d.LeaseExpiresAt != nil && !d.LeaseExpiresAt.After(now) {
			// Delivered: the host got it, and may have run it.
			return shared.NextAction{RetrySafe: d.Status == store.StatusDelivering, Action: "wait",
				Why: "the lease expired " + shared.Since(now, *d.LeaseExpiresAt) + " and " + ledger + "; the cloud's sweep counts a failed attempt and hands it out again. If the host is down, see `cloud ctl hosts show " + d.HostID + "`."}
		}
		return shared.NextAction{RetrySafe: false, Action: "wait",
			Why: "handed to host " + d.HostID + ", whose handler may be running now (" + ledger + "). Wait for its ack or the lease's end."}
	case store.StatusQueued:
		return shared.NextAction{RetrySafe: true, Action: "wait",
			Why: "queued for host " + d.HostID + " (pushed over its socket, or in the answer to its next heartbeat); nothing ran since it was queued. If it waits long, see `cloud ctl hosts show " + d.HostID + "`."}
	}
	return shared.NextAction{RetrySafe: false, Action: "investigate", Why: "unknown status " + string(d.Status)}
}

// LastFailure is the audit reason of the delivery's last failed attempt
// since it was last queued ("" when none).
func LastFailure(evs []*store.DeliveryEvent) string {
	for i := len(evs) - 1; i >= 0; i-- {
		switch evs[i].To {
		case store.StatusRetrying, store.StatusDLQ:
			return evs[i].Reason
		case store.StatusQueued:
			return ""
		}
	}
	return ""
}

// mayHaveRun says whether a failure leaves open whether the handler ran:
// the lease ended, or the socket that carried it closed, while the host
// held the webhook, and it reported nothing. (A nack says it failed; the
// other failures say it never reached the host.)
func mayHaveRun(failure string) bool {
	for _, tr := range []store.Transition{store.TransitionExpire, store.TransitionConnectionLost} {
		if failure == tr.Reason || strings.HasPrefix(failure, tr.Reason+":") {
			return true
		}
	}
	return false
}

// Ref names a delivery with its host, as a link to it needs.
type Ref struct{ ID, HostID string }

// ReplayNote is the note a delivery's trail gets when an operator replays
// it as replayID to host toHost (store.ReplayOf's Note); Replays reads it.
func ReplayNote(replayID, toHost string) string {
	return "replayed as " + replayID + " to host " + toHost + ", by an operator"
}

// ReplayReceiveNote is a replay's receive note (its first event's reason
// is "received (" + note + ")"); ReplayOf reads it.
func ReplayReceiveNote(ofID, ofHost string) string {
	return "replay of " + ofID + " of host " + ofHost + ", by an operator"
}

// Replays lists the replays made of a delivery, oldest first, from the
// notes of its trail (ReplayNote).
func Replays(evs []*store.DeliveryEvent) []Ref {
	var out []Ref
	for _, ev := range evs {
		if ev.From != ev.To {
			continue
		}
		if r, ok := cutRef(ev.Reason, "replayed as ", " to host "); ok {
			out = append(out, r)
		}
	}
	return out
}

// ReplayOf is the delivery a replay replays, from its first event
// (ReplayReceiveNote); ok false for any other delivery.
func ReplayOf(evs []*store.DeliveryEvent) (Ref, bool) {
	if len(evs) == 0 || evs[0].From != "" {
		return Ref{}, false
	}
	return cutRef(strings.TrimPrefix(evs[0].Reason, store.TransitionReceive.Reason+" ("), "replay of ", " of host ")
}

// cutRef reads "<prefix>ID<mid>HOST, by an operator…".
func cutRef(s, prefix, mid string) (Ref, bool) {
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok {
		return Ref{}, false
	}
	id, rest, ok := strings.Cut(rest, mid)
	if !ok {
		return Ref{}, false
	}
	host, _, ok := strings.Cut(rest, ",")
	if !ok || id == "" || host == "" {
		return Ref{}, false
	}
	return Ref{ID: id, HostID: host}, true
}

func sinceP(now time.Time, t *time.Time) string {
	if t == nil {
		return "-"
	}
	return shared.Since(now, *t)
}

// cut shortens s to n runes, marking the cut.
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
