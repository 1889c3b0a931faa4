package agent

import (
	"database/sql"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/host/ledger"
	"github.com/relaykit/relay/shared"
)

// A ledger that cannot record (its disk full) stops the agent taking new
// work: each handler run would be lost and run again when the cloud hands
// the webhook out again. Once a write commits, work resumes.
func TestUnrecordableLedgerTakesNoNewWork(t *testing.T) {
	t.Parallel()
	first, second := webhook("github:first:1", "pull_request"), webhook("github:second:1", "pull_request")
	var served atomic.Int32
	var side *sql.DB
	b := setup(t, func(b *testBundle) {
		var err error
		side, err = sql.Open("sqlite", b.ledgerPath)
		require.NoError(t, err)
		t.Cleanup(func() { side.Close() })
		// Every outbox write fails, as on a full disk: outcomes (recorded
		// with their ack) and the agent's probe alike.
		_, err = side.Exec(`CREATE TRIGGER full BEFORE INSERT ON outbox BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END`)
		require.NoError(t, err)
		b.cloud.answer = func(n int, req shared.HeartbeatRequest) (int, shared.HeartbeatResponse) {
			resp := shared.HeartbeatResponse{Status: "ok", HeartbeatIntervalS: 1}
			switch {
			case n == 1:
				resp.Webhooks = []shared.Webhook{first}
			case *req.MaxWebhooks > 0 && served.Add(1) == 1:
				resp.Webhooks = []shared.Webhook{second}
			}
			return http.StatusOK, resp
		}
	})

	b.next(t)
	b.eventually(t, "the first outcome fails to record", b.agent.Unrecordable)
	require.Equal(t, ledger.Result(""), b.result(t, first.DeliveryID))
	for range 3 {
		b.advance(t, time.Second)
		hb := b.next(t)
		require.Zero(t, *hb.req.MaxWebhooks, "no new work while the ledger cannot record")
		require.Zero(t, hb.req.WaitS, "no long poll either")
	}
	require.EqualValues(t, 1, b.handler.calls.Load(), "only the first ran")
	require.True(t, b.agent.Unrecordable())

	// Space returns: the next heartbeat's probe commits and work resumes.
	_, err := side.Exec(`DROP TRIGGER full`)
	require.NoError(t, err)
	b.advance(t, time.Second)
	hb := b.nextWhere(t, func(hb heartbeatSeen) bool { return *hb.req.MaxWebhooks > 0 })
	require.False(t, b.agent.Unrecordable())
	require.Positive(t, *hb.req.MaxWebhooks)
	b.eventually(t, "the second is handled and recorded", func() bool { return b.result(t, second.DeliveryID) == ledger.ResultSuccess })
	hb = b.nextWhere(t, func(hb heartbeatSeen) bool { return len(hb.req.WebhookAcks) > 0 })
	require.Equal(t, []string{second.DeliveryID}, hb.req.WebhookAcks, "acked; the probes left nothing in the outbox")
}
