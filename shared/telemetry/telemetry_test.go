package telemetry

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/relaykit/relay/shared"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// Spans continue the delivery's trace, each child of the one before, and
// what is sent on names the new span.
func TestSpansContinueTheTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	tr := New(tp, "test")
	require.True(t, tr.Enabled())

	ctx, intake, sent := tr.Start(context.Background(), "intake", parent, attribute.String("relay.delivery_id", "github:1:2"))
	_, store := tr.StartChild(ctx, "store")
	store.End()
	intake.End()
	spans := exp.GetSpans()
	require.Len(t, spans, 2)
	require.Equal(t, "store", spans[0].Name)
	require.Equal(t, "intake", spans[1].Name)
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", spans[1].SpanContext.TraceID().String())
	require.Equal(t, "00f067aa0ba902b7", spans[1].Parent.SpanID().String(), "the provider's span is the parent")
	require.Equal(t, spans[1].SpanContext.SpanID(), spans[0].Parent.SpanID())
	require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-"+spans[1].SpanContext.SpanID().String()+"-01", sent)

	// No parent: a new trace.
	_, root, sent := tr.Start(context.Background(), "intake", "")
	root.End()
	require.NotEqual(t, "4bf92f3577b34da6a3ce929d0e0e4736", shared.TraceIDOf(sent))
	require.Equal(t, exp.GetSpans()[2].SpanContext.TraceID().String(), shared.TraceIDOf(sent))
	require.False(t, exp.GetSpans()[2].Parent.IsValid())
}

// Without OTEL_EXPORTER_OTLP_ENDPOINT nothing is exported, and the
// traceparent still moves to a new span of the same trace.
func TestNoExport(t *testing.T) {
	tr, shutdown, err := Setup(context.Background(), "cloud", func(string) string { return "" })
	require.NoError(t, err)
	require.False(t, tr.Enabled())
	_, span, sent := tr.Start(context.Background(), "intake", parent)
	require.False(t, span.IsRecording())
	span.End()
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", shared.TraceIDOf(sent))
	require.NotEqual(t, parent, sent)
	require.NoError(t, shutdown(context.Background()))
	var none *Tracer
	_, span, _ = none.Start(context.Background(), "x", "")
	span.End()
}

func TestBadEndpoint(t *testing.T) {
	for _, bad := range []string{"collector:4318", "ftp://x", "http://"} {
		_, _, err := Setup(context.Background(), "cloud", func(string) string { return bad })
		var se *SettingError
		require.ErrorAs(t, err, &se, bad)
		require.Contains(t, err.Error(), EndpointEnv)
		require.Contains(t, err.Error(), "want")
	}
}

// With OTEL_EXPORTER_OTLP_ENDPOINT set, spans reach an OTLP/HTTP
// collector (here an in-process one).
func TestExportToCollector(t *testing.T) {
	var mu sync.Mutex
	var bodies [][]byte
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if r.URL.Path == "/v1/traces" {
			bodies = append(bodies, b)
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	t.Setenv(EndpointEnv, collector.URL)
	tr, shutdown, err := Setup(context.Background(), "host", os.Getenv)
	require.NoError(t, err)
	require.True(t, tr.Enabled())
	_, span, _ := tr.Start(context.Background(), "handler", parent)
	span.End()
	require.NoError(t, shutdown(context.Background()), "flushes")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, bodies, 1)
	traceID, _ := shared.ParseTraceParent(parent)
	require.True(t, bytes.Contains(bodies[0], traceID.TraceID[:]), "the span's trace id is in the export")
	require.True(t, bytes.Contains(bodies[0], []byte("handler")))
	require.True(t, bytes.Contains(bodies[0], []byte("host")), "the service name")
}
