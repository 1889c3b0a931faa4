//go:build unix

package localapi

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	_ "modernc.org/sqlite"

	"github.com/relaykit/relay/host/ledger"
)

// benchRows is the ledger size the page must stay fast with.
const benchRows = 100_000

// benchLedger returns a ledger of benchRows rows, one a second back from
// now, in three sources, with one row in errEvery failed (with output),
// written straight into the file in one transaction (DeliveryRecord would
// make filling it the benchmark).
func benchLedger(b *testing.B, errEvery int) *ledger.Ledger {
	b.Helper()
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "ledger.db")
	l, err := ledger.Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	l.Close()
	db, err := sql.Open("sqlite", path+"?_pragma=journal_mode(WAL)")
	if err != nil {
		b.Fatal(err)
	}
	_, err = db.ExecContext(ctx, fmt.Sprintf(`WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < %d)
		INSERT INTO ledger (delivery_id, source, event_type, event_action, received_at, processed_at, result,
			attempts, cloud_attempt, error, duration_ms, correlation_id, handler, response_status, exit_code,
			output, summary, fields)
		SELECT printf('github:d%%06d:1', i), CASE i %% 3 WHEN 0 THEN 'github' WHEN 1 THEN 'slack' ELSE 'stripe' END,
			'pull_request', 'opened', %[2]d - i * 1000 - 400, %[2]d - i * 1000,
			CASE WHEN i %% %[3]d = 7 THEN 'error' ELSE 'success' END, 1, 1,
			CASE WHEN i %% %[3]d = 7 THEN 'exit status 1' ELSE '' END, 120 + i %% 900, printf('corr-%%d', i),
			'exec ./handle.sh', NULL, CASE WHEN i %% %[3]d = 7 THEN 1 ELSE 0 END,
			CASE WHEN i %% %[3]d = 7 THEN printf('%%.*c', 1500, 'x') || ' <script>alert(1)</script>' ELSE 'ok' END,
			printf('pull_request.opened acme/app #%%d', i),
			'{"github.number":"7","github.repo":"acme/app","github.url":"https://github.com/acme/app/pull/7"}'
		FROM n`, benchRows-1, now.UnixMilli(), errEvery))
	if err != nil {
		b.Fatal(err)
	}
	db.Close()
	if l, err = ledger.Open(ctx, path); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	if n, err := l.DeliveryCount(ctx); err != nil || n != benchRows {
		b.Fatalf("ledger holds %d rows (%v), want %d", n, err, benchRows)
	}
	return l
}

// BenchmarkPage renders each page over a ledger of 100,000 rows, in process
// (no network): the time is the handler's, queries and template together.
// errors=10% has a failure in every ten rows, errors=0.1% one in a
// thousand (the errors page then reads further back for a page of them).
func BenchmarkPage(b *testing.B) {
	for _, rate := range []struct {
		name  string
		every int
	}{{"errors=10%", 10}, {"errors=0.1%", 1000}} {
		l := benchLedger(b, rate.every)
		s := New(l, pageAgent(), 30*time.Second, clockwork.NewFakeClockAt(now), slog.New(slog.DiscardHandler))
		s.SetCloudURL("https://relay.example.com")
		for _, path := range []string{
			"/", "/deliveries", "/deliveries?limit=500", "/deliveries?cursor=" + cursorAt(b, l, 50_000),
			"/deliveries?source=stripe&result=error", "/errors", "/delivery?id=github%3Ad050007%3A1",
		} {
			b.Run(rate.name+" "+path, func(b *testing.B) {
				b.ReportAllocs()
				var size int
				cpu0 := cpuTime(b)
				for b.Loop() {
					rec := httptest.NewRecorder()
					req := httptest.NewRequest("GET", path, nil)
					req.Host = "127.0.0.1:7071"
					s.ServeHTTP(rec, req)
					if rec.Code != http.StatusOK {
						b.Fatalf("%s: %d %s", path, rec.Code, rec.Body.String())
					}
					size = rec.Body.Len()
				}
				b.ReportMetric(float64(size), "bytes/page")
				// CPU time of the process (GC included) per page: steadier
				// than ns/op on a machine others load.
				b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// cpuTime is the process's user and system time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cursorAt returns the cursor of the page that starts after row n.
func cursorAt(b *testing.B, l *ledger.Ledger, n int) string {
	_, next, err := l.DeliveryList(context.Background(), ledger.ListParams{Limit: n})
	if err != nil {
		b.Fatal(err)
	}
	return next
}
