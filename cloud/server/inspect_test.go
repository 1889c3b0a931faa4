package server

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

// TestHostDeliveriesOwnOnly: a host reads the cloud's record of its own
// deliveries, never another host's, whatever it asks; without a token it
// reads nothing.
func TestHostDeliveriesOwnOnly(t *testing.T) {
	b := setup(t)
	hostA, tokenA := b.newHost("a")
	hostB, _ := b.newHost("b")
	b.sent(hostA, "a-1")
	b.sent(hostB, "b-1")
	auth := map[string]string{"Authorization": "Bearer " + tokenA}

	var page shared.HostDeliveriesResponse
	a := b.do("GET", shared.PathHostDeliveries+"?host="+hostB, nil, auth)
	require.Equal(t, 200, a.status, string(a.body))
	a.json(t, &page)
	require.Len(t, page.Webhooks, 1)
	require.True(t, strings.HasPrefix(page.Webhooks[0].DeliveryID, "github:a-1:"), "its own, not the one asked for")
	a = b.do("GET", shared.PathHostDeliveries+"?event_id=b-1", nil, auth)
	a.json(t, &page)
	require.Empty(t, page.Webhooks)

	require.Equal(t, 401, b.do("GET", shared.PathHostDeliveries, nil, nil).status)
	require.Equal(t, 401, b.do("GET", shared.PathHostDeliveries, nil, map[string]string{"Authorization": "Bearer " + testAdmin}).status,
		"the admin token is no host token")
	a = b.do("GET", shared.PathHostDeliveries+"?since=yesterday", nil, auth)
	require.Equal(t, 400, a.status)
	require.Equal(t, "invalid", a.errCode(t))
}

// TestHeartbeatRecordsResults: results that come with their ack or nack are
// kept and shown by the admin API; bad ones are refused.
func TestHeartbeatRecordsResults(t *testing.T) {
	b := setup(t)
	hostID, token := b.newHost("h")
	id := b.leaseOne(hostID, token, "r-1").DeliveryID

	for name, body := range map[string]string{
		"bad result":        `{"webhook_acks": ["` + id + `"], "webhook_results": [{"delivery_id": "` + id + `", "result": "done"}]}`,
		"no id":             `{"webhook_acks": ["` + id + `"], "webhook_results": [{"result": "success"}]}`,
		"more than reports": `{"webhook_acks": ["` + id + `"], "webhook_results": [{"delivery_id": "` + id + `", "result": "success"}, {"delivery_id": "x", "result": "success"}]}`,
	} {
		a := b.do("POST", "/api/hosts/heartbeat", strings.NewReader(body), map[string]string{"Authorization": "Bearer " + token})
		require.Equal(t, 400, a.status, "%s: %s", name, a.body)
		require.Equal(t, "invalid", a.errCode(t), name)
	}
	_, err := b.store.DeliveryResultGet(context.Background(), id)
	require.ErrorIs(t, err, store.ErrNotFound, "nothing kept from refused heartbeats")

	status := 204
	a := b.heartbeat(token, shared.HeartbeatRequest{WebhookAcks: []string{id}, WebhookResults: []shared.WebhookResult{
		{DeliveryID: id, Attempt: 1, Result: "success", Handler: "forward http://127.0.0.1:3000/hook", ResponseStatus: &status, DurationMS: 42}}})
	require.Equal(t, 200, a.status, string(a.body))
	var got struct {
		Delivery struct {
			Status string `json:"status"`
			HostID string `json:"host_id"`
		} `json:"delivery"`
		HostResult *shared.HostResult `json:"host_result"`
	}
	b.admin("GET", "/api/hosts/"+hostID+"/webhooks/"+id, nil).json(t, &got)
	require.Equal(t, "acked", got.Delivery.Status)
	require.Equal(t, hostID, got.Delivery.HostID)
	require.NotNil(t, got.HostResult)
	require.Equal(t, "success", got.HostResult.Result)
	require.Equal(t, &status, got.HostResult.ResponseStatus)
	require.Equal(t, int64(42), got.HostResult.DurationMS)
	require.Equal(t, b.clock.Now().UTC(), got.HostResult.ReportedAt)
}

func TestFindAndEventsValidate(t *testing.T) {
	b := setup(t)
	hostID, _ := b.newHost("h")
	b.sent(hostID, "f-1")
	for _, q := range []string{"/api/deliveries?status=lost", "/api/deliveries?since=1h", "/api/deliveries?cursor=!!!",
		"/api/deliveries?limit=501", "/api/events?after=-1", "/api/events?last=0", "/api/events?last=501", "/api/events?limit=x"} {
		a := b.admin("GET", q, nil)
		require.Equal(t, 400, a.status, "%s: %s", q, a.body)
		require.Equal(t, "invalid", a.errCode(t), q)
	}
	require.Equal(t, 401, b.do("GET", "/api/deliveries", nil, nil).status)
	require.Equal(t, 401, b.do("GET", "/api/events", nil, nil).status)

	var evs struct {
		Events []struct {
			ID     int64  `json:"id"`
			HostID string `json:"host_id"`
			To     string `json:"to"`
		} `json:"events"`
		NextAfter int64 `json:"next_after"`
	}
	b.admin("GET", "/api/events?last=1", nil).json(t, &evs)
	require.Len(t, evs.Events, 1)
	require.Equal(t, hostID, evs.Events[0].HostID)
	require.Equal(t, "queued", evs.Events[0].To)
	require.Equal(t, evs.Events[0].ID, evs.NextAfter)
	b.admin("GET", "/api/events?after="+itoa(evs.NextAfter), nil).json(t, &evs)
	require.Empty(t, evs.Events)
}
