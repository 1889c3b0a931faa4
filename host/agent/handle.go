package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/relaykit/relay/host/handler"
	"github.com/relaykit/relay/host/ledger"
	"github.com/relaykit/relay/host/summary"
	"github.com/relaykit/relay/shared"
	"github.com/relaykit/relay/shared/steptime"
	"github.com/relaykit/relay/shared/telemetry"
)

// outcome is what a run produced, to be recorded.
type outcome struct {
	entry     ledger.Entry
	retryable bool
	ran       bool // the handler ran (not skipped)
}

// run runs w's handler, or decides to skip it, and returns the outcome to
// record.
func (a *Agent) run(w *shared.Webhook) outcome {
	a.mu.Lock()
	src, known := a.sources[w.Source]
	a.mu.Unlock()
	sum := summary.Of(*w, src.Parser)
	start := a.clock.Now()
	o := outcome{entry: ledger.Entry{
		DeliveryID:    w.DeliveryID,
		Source:        w.Source,
		EventType:     w.EventType,
		EventAction:   w.EventAction,
		ReceivedAt:    w.ReceivedAt,
		CloudAttempt:  w.Attempt,
		CorrelationID: w.CorrelationID,
		Summary:       sum.Text,
		Fields:        sum.Fields,
	}}
	e := &o.entry
	route, routed := pickRoute(src, *w)
	if why := skipReason(w, src, known, routed); why != "" {
		// The reason goes to the cloud with the result (its error field),
		// where an operator sees why and can replay the webhook.
		e.Result, e.Output, e.Error = ledger.ResultSkipped, "skipped: "+why, why
	} else {
		e.Handler = route.Handler.Name()
		logWebhook(a.log, slog.LevelDebug, "running handler", w, slog.String("handler", e.Handler))
		// The handler's span continues the webhook's trace; the handler
		// is told of it (forward's traceparent header, exec's TRACEPARENT).
		ctx, span, tp := a.opts.Tracer.Start(a.handlerCtx, "handler", w.Headers[shared.HeaderTraceParent],
			attribute.String("relay.delivery_id", w.DeliveryID), attribute.String("relay.source", w.Source),
			attribute.String("relay.handler", e.Handler))
		job := handler.Job{Webhook: *w, Summary: sum}
		job.Webhook.Headers = maps.Clone(w.Headers)
		if job.Webhook.Headers == nil {
			job.Webhook.Headers = map[string]string{}
		}
		job.Webhook.Headers[shared.HeaderTraceParent] = tp
		steptime.Stamp(job.Webhook.Headers, "handler", time.Now())
		out := route.Handler.Handle(ctx, job)
		var failed error
		if !out.OK {
			failed = errors.New(out.Error)
		}
		telemetry.End(span, failed)
		o.ran = true
		a.fault(FaultAfterHandler)
		e.Result = ledger.ResultSuccess
		if !out.OK {
			e.Result, e.Error, o.retryable = ledger.ResultError, out.Error, out.Retryable
		}
		e.Output = out.Output
		if out.ResponseStatus != 0 {
			e.ResponseStatus = &out.ResponseStatus
		}
		e.ExitCode = out.ExitCode
	}
	e.ProcessedAt = a.clock.Now()
	e.DurationMS = e.ProcessedAt.Sub(start).Milliseconds()
	return o
}

// skipReason says why w is not run on this host, or "" when it is.
func skipReason(w *shared.Webhook, src Source, known, routed bool) string {
	event := w.EventType
	if w.EventAction != "" {
		event += "." + w.EventAction
	}
	switch {
	case !known:
		return fmt.Sprintf("this host's configuration has no source %q (check the name under \"webhooks\"; `host run --check` compares it with the cloud's)", w.Source)
	case !src.Enabled:
		return fmt.Sprintf("source %q is disabled in this host's configuration", w.Source)
	case !shared.EventWanted(src.Events, w.EventType, w.EventAction):
		return fmt.Sprintf("event %q is not among source %q's events in this host's configuration", event, w.Source)
	case !routed:
		return fmt.Sprintf("no route of source %q takes event %q", w.Source, event)
	}
	return ""
}

// pickRoute returns the first route of src whose events match w.
func pickRoute(src Source, w shared.Webhook) (Route, bool) {
	for _, r := range src.Routes {
		if r.Handler != nil && shared.EventWanted(r.Events, w.EventType, w.EventAction) {
			return r, true
		}
	}
	return Route{}, false
}

func (a *Agent) fault(point string) {
	if a.opts.FaultHook != nil {
		a.opts.FaultHook(point)
	}
}
