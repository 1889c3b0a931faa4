package shared

import (
	"errors"
	"fmt"
)

// MaxReportItems bounds one report of a host, over either transport: the
// acks, nacks and extends of a heartbeat (webhook_acks, webhook_nacks,
// webhook_extends) or of a socket's report frame together, and, on their
// own, the webhooks a host says it holds (a heartbeat's webhooks_held, a
// hello's held). The cloud refuses a report past it whole: a heartbeat
// with 400, a frame by closing the socket with CloseProtocol. A host's
// heartbeat lists up to a thousand outcomes with the extends of a full
// lease window, well within it.
const MaxReportItems = 10 * MaxMaxWebhooks

// Validate returns why a heartbeat request breaks the protocol, or nil:
// the report it carries (validateReport), and what it asks for.
func (r *HeartbeatRequest) Validate() error {
	if r.MaxWebhooks != nil && *r.MaxWebhooks < 0 {
		return errors.New("max_webhooks must not be negative")
	}
	if r.WaitS < 0 {
		return errors.New("wait_s must not be negative")
	}
	if r.Stopping && (r.MaxWebhooks == nil || *r.MaxWebhooks > 0 || r.WaitS > 0) {
		return errors.New("a stopping heartbeat takes no work: max_webhooks 0 and no wait_s")
	}
	if len(r.WebhooksHeld) > 0 && !r.AnswerLost {
		return errors.New("webhooks_held is only sent with answer_lost")
	}
	return validateReport(heartbeatNames, r.WebhookAcks, r.WebhookNacks, r.WebhookExtends, r.WebhooksHeld, r.WebhookResults)
}

// Validate returns why a frame a host sends breaks the protocol, or nil:
// a hello's held webhooks and a report are checked as a heartbeat's
// (validateReport); other frames are checked where they are
// applied.
func (f *Frame) Validate() error {
	switch f.Type {
	case FrameHello:
		return validateReport(helloNames, nil, nil, nil, f.Held, nil)
	case FrameReport:
		return validateReport(reportNames, f.Acks, f.Nacks, f.Extends, nil, f.Results)
	}
	return nil
}

// reportFields names a report's members as a message carries them.
type reportFields struct {
	what                                string // the message
	acks, nacks, extends, held, results string
}

var (
	heartbeatNames = reportFields{what: "a heartbeat", acks: "webhook_acks", nacks: "webhook_nacks",
		extends: "webhook_extends", held: "webhooks_held", results: "webhook_results"}
	reportNames = reportFields{what: "a report", acks: "acks", nacks: "nacks", extends: "extends", results: "results"}
	helloNames  = reportFields{what: "a hello", held: "held"}
)

// validateReport is the one check of a host's report, whichever message
// carries it: at most MaxReportItems acks, nacks and extends, and as many
// held; no empty delivery id; results only of what it acks or nacks (no
// more of them than acks and nacks), each with a delivery id and a result
// of success, error or skipped.
func validateReport(n reportFields, acks []string, nacks []Nack, extends, held []string, results []WebhookResult) error {
	if c := len(acks) + len(nacks) + len(extends); c > MaxReportItems {
		return fmt.Errorf("%s lists %d acks, nacks and extends, at most %d", n.what, c, MaxReportItems)
	}
	if len(held) > MaxReportItems {
		return fmt.Errorf("%s holds %d webhooks, at most %d", n.what, len(held), MaxReportItems)
	}
	for _, l := range []struct {
		name string
		ids  []string
	}{{n.acks, acks}, {n.extends, extends}, {n.held, held}} {
		for i, id := range l.ids {
			if id == "" {
				return fmt.Errorf("%s[%d] is empty", l.name, i)
			}
		}
	}
	for i, nk := range nacks {
		if nk.DeliveryID == "" {
			return fmt.Errorf("%s[%d].delivery_id is empty", n.nacks, i)
		}
	}
	if len(results) > len(acks)+len(nacks) {
		return fmt.Errorf("more %s than acks and nacks", n.results)
	}
	for i, r := range results {
		if r.DeliveryID == "" || !resultValid(r.Result) {
			return fmt.Errorf("%s[%d]: want a delivery_id and a result of success, error or skipped", n.results, i)
		}
	}
	return nil
}

// resultValid reports whether r is a run's result as a host records it.
func resultValid(r string) bool { return r == "success" || r == "error" || r == "skipped" }
