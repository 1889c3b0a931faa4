// Package telemetry starts the spans of a webhook's trace in both binaries
// (intake, store, lease, handler) and, when OTEL_EXPORTER_OTLP_ENDPOINT is
// set, exports them over OTLP/HTTP with the OpenTelemetry SDK. Without it
// nothing is exported: spans are the SDK's no-op ones, and only the W3C
// traceparent carried with each delivery is kept up to date.
package telemetry

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/relaykit/relay/shared"
)

// EndpointEnv is the standard OpenTelemetry variable that turns export on.
const EndpointEnv = "OTEL_EXPORTER_OTLP_ENDPOINT"

// Tracer starts spans. The zero value and nil are valid, and export
// nothing.
type Tracer struct {
	tracer trace.Tracer // nil: no export
}

// New returns a tracer over tp (the SDK's, or a test's).
func New(tp trace.TracerProvider, name string) *Tracer {
	return &Tracer{tracer: tp.Tracer(name)}
}

// Setup returns the binary's tracer: exporting to the OTLP/HTTP endpoint
// named by OTEL_EXPORTER_OTLP_ENDPOINT (the SDK reads that variable and its
// companions, such as OTEL_EXPORTER_OTLP_HEADERS) as service, or a tracer
// that exports nothing when it is unset. shutdown flushes what is
// buffered.
func Setup(ctx context.Context, service string, getenv func(string) string) (t *Tracer, shutdown func(context.Context) error, err error) {
	endpoint := getenv(EndpointEnv)
	if endpoint == "" {
		return &Tracer{}, func(context.Context) error { return nil }, nil
	}
	if u, err := url.Parse(endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, nil, &SettingError{fmt.Sprintf("%s=%q: want an http:// or https:// URL of an OTLP/HTTP collector, such as http://localhost:4318", EndpointEnv, endpoint)}
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("otlp exporter: %w", err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", service))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)), sdktrace.WithResource(res))
	return New(tp, "github.com/relaykit/relay"), tp.Shutdown, nil
}

// SettingError is a bad OTEL_EXPORTER_OTLP_ENDPOINT: a usage error.
type SettingError struct{ msg string }

func (e *SettingError) Error() string { return e.msg }

// Enabled says whether spans are exported.
func (t *Tracer) Enabled() bool { return t != nil && t.tracer != nil }

// Start starts a span named name under parent, a traceparent header value
// (a new trace when it is not one), and returns it with the traceparent
// that names it, to be sent on. Without export the span is a no-op and
// the traceparent a new span id of parent's trace.
func (t *Tracer) Start(ctx context.Context, name, parent string, attrs ...attribute.KeyValue) (context.Context, trace.Span, string) {
	if !t.Enabled() {
		tp := shared.ContinueTraceParent(parent)
		return ctx, noop.Span{}, tp.String()
	}
	if p, ok := shared.ParseTraceParent(parent); ok {
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: p.TraceID, SpanID: p.SpanID,
			TraceFlags: trace.TraceFlags(p.Flags), Remote: true})
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	} else {
		ctx = trace.ContextWithSpanContext(ctx, trace.SpanContext{}) // a new root
	}
	ctx, span := t.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
	return ctx, span, traceParentOf(span.SpanContext())
}

// StartChild starts a span named name under the span in ctx.
func (t *Tracer) StartChild(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !t.Enabled() {
		return ctx, noop.Span{}
	}
	return t.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}

// End ends span, marking it failed with err when err is not nil.
func End(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

func traceParentOf(sc trace.SpanContext) string {
	tid, sid := sc.TraceID(), sc.SpanID()
	return "00-" + hex.EncodeToString(tid[:]) + "-" + hex.EncodeToString(sid[:]) + "-" + hex.EncodeToString([]byte{byte(sc.TraceFlags())})
}
