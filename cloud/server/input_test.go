package server

import (
	"bytes"
	"context"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/verify"
	"github.com/relaykit/relay/shared"
)

// TestIntakeUnsafeEventIDIsHashed: a signed Stripe event whose id carries a
// NUL and a newline is stored under a safe id (the same on a retry, so it is
// a duplicate), its type without control characters, and its delivery id
// still splits into source, event id and milliseconds.
func TestIntakeUnsafeEventIDIsHashed(t *testing.T) {
	b := newEdge(t, openStore(t), ringOf(t, 1), newClock(), Config{})
	hostID, token := b.newHost("h")
	b.addSource(hostID, "stripe", map[string]any{"secrets": []string{"whsec_abc"}})
	body := []byte(`{"id":"evt_\u0000x\ny","object":"event","type":"invoice.paid\u001b]0;pwned\u0007"}`)
	send := func() shared.IntakeResponse {
		a := b.do("POST", "/api/webhooks/"+hostID+"/stripe", bytes.NewReader(body), stripeHeaders("whsec_abc", b.clock.Now().Unix(), body))
		require.Equal(t, 200, a.status, string(a.body))
		var r shared.IntakeResponse
		a.json(t, &r)
		return r
	}
	first := send()
	require.Equal(t, shared.IntakeQueued, first.Status)
	safe := verify.SafeEventID("evt_\x00x\ny")
	require.Regexp(t, `^h-[0-9a-f]{32}$`, safe)
	received := b.clock.Now().UnixMilli()
	require.Equal(t, "stripe:"+safe+":"+strconv.FormatInt(received, 10), first.DeliveryID)

	source, rest, _ := strings.Cut(first.DeliveryID, ":")
	i := strings.LastIndexByte(rest, ':')
	require.Equal(t, "stripe", source)
	require.Equal(t, safe, rest[:i])
	require.Equal(t, strconv.FormatInt(received, 10), rest[i+1:])

	b.clock.Advance(1000)
	require.Equal(t, shared.IntakeDuplicate, send().Status, "the provider's retry has the same safe id")

	d, err := b.store.DeliveryGet(context.Background(), hostID, first.DeliveryID)
	require.NoError(t, err)
	require.Equal(t, safe, d.EventID)
	require.Equal(t, "invoice.paid]0;pwned", d.EventType)
	require.Equal(t, body, d.RawBody, "the body stays the provider's bytes")

	var hb shared.HeartbeatResponse
	b.heartbeat(token, shared.HeartbeatRequest{}).json(t, &hb)
	require.Len(t, hb.Webhooks, 1)
	require.Equal(t, first.DeliveryID, hb.Webhooks[0].DeliveryID)
}

// TestAdminReachesSlashedDeliveryID: a delivery whose event id has a '/' is
// read and retried through the admin API with the '/' escaped.
func TestAdminReachesSlashedDeliveryID(t *testing.T) {
	b := newEdge(t, openStore(t), ringOf(t, 1), newClock(), Config{})
	hostID, token := b.newHost("h")
	b.addSource(hostID, "billing", map[string]any{"provider": "generic", "secrets": []string{"s"}})
	body := []byte(`{"type":"invoice.created"}`)
	a := b.do("POST", "/api/webhooks/"+hostID+"/billing", bytes.NewReader(body), genericHeaders("s", "a/b", body))
	require.Equal(t, 202, a.status, string(a.body))
	var in shared.IntakeResponse
	a.json(t, &in)
	id := in.DeliveryID
	require.True(t, strings.HasPrefix(id, "billing:a/b:"), id)
	path := "/api/hosts/" + hostID + "/webhooks/" + url.PathEscape(id)
	require.Contains(t, path, "a%2Fb")

	var one struct {
		Delivery shared.Delivery `json:"delivery"`
	}
	a = b.admin("GET", path, nil)
	require.Equal(t, 200, a.status, string(a.body))
	a.json(t, &one)
	require.Equal(t, id, one.Delivery.DeliveryID)
	require.Equal(t, "a/b", one.Delivery.EventID)
	require.Equal(t, 404, b.admin("GET", "/api/hosts/"+hostID+"/webhooks/"+id, nil).status, "an unescaped '/' is another path")

	// Dead-lettered by a final nack, then retried by its escaped id.
	var hb shared.HeartbeatResponse
	b.heartbeat(token, shared.HeartbeatRequest{}).json(t, &hb)
	require.Len(t, hb.Webhooks, 1)
	a = b.heartbeat(token, shared.HeartbeatRequest{MaxWebhooks: shared.Ptr(0),
		WebhookNacks: []shared.Nack{{DeliveryID: id, Error: "bad", Retryable: false, Attempt: 1}}})
	require.Equal(t, 200, a.status, string(a.body))
	d, err := b.store.DeliveryGet(context.Background(), hostID, id)
	require.NoError(t, err)
	require.Equal(t, store.StatusDLQ, d.Status)

	a = b.admin("POST", path+"/retry", nil)
	require.Equal(t, 200, a.status, string(a.body))
	d, err = b.store.DeliveryGet(context.Background(), hostID, id)
	require.NoError(t, err)
	require.Equal(t, store.StatusQueued, d.Status)
}

// TestRetryScheduleRange: delays are range-checked as sent, before they
// become durations that 1e10 s would overflow and 1e308 s turn into 0.
func TestRetryScheduleRange(t *testing.T) {
	b := setup(t)
	hostID, _ := b.newHost("h")
	path := "/api/hosts/" + hostID + "/sources/github"
	for name, c := range map[string]struct {
		body, want string
	}{
		"overflowing":       {`{"retry_schedule_s":[0,1e10]}`, "retry_schedule_s[1] must be from 0 to 604800 seconds"},
		"huge":              {`{"retry_schedule_s":[0,1e308]}`, "retry_schedule_s[1] must be from 0 to 604800 seconds"},
		"past float64":      {`{"retry_schedule_s":[0,1e400]}`, `field "retry_schedule_s": want a number in range, got the number 1e400`},
		"negative":          {`{"retry_schedule_s":[0,-0.5]}`, "retry_schedule_s[1] must be from 0 to 604800 seconds"},
		"over a week":       {`{"retry_schedule_s":[0,30,604800.001]}`, "retry_schedule_s[2] must be from 0 to 604800 seconds"},
		"finer than 1 ms":   {`{"retry_schedule_s":[0,1.0004]}`, "retry_schedule_s[1]: 1.0004 is finer than the millisecond a delay is kept to"},
		"a string":          {`{"retry_schedule_s":[0,"30"]}`, `field "retry_schedule_s": want a number, got string`},
		"first not 0":       {`{"retry_schedule_s":[1e-9]}`, "retry_schedule_s[0]: 1e-09 is finer than the millisecond a delay is kept to"},
		"max attempts 1.5":  {`{"max_attempts":1.5}`, `field "max_attempts": want a whole number, got the number 1.5`},
		"max attempts 1e30": {`{"max_attempts":1e30}`, `field "max_attempts": want a whole number in range, got the number 1e30`},
	} {
		a := b.do("PUT", path, strings.NewReader(c.body), map[string]string{"Authorization": "Bearer " + testAdmin})
		require.Equal(t, 400, a.status, name)
		var e shared.ErrorResponse
		a.json(t, &e)
		require.Equal(t, c.want, e.Error.Message, name)
	}
	src, err := b.store.SourceGet(context.Background(), hostID, "github")
	require.NoError(t, err)
	require.Nil(t, src.RetryDelays, "nothing stored")

	a := b.admin("PUT", path, map[string]any{"retry_schedule_s": []float64{0, 0.001, 604800}})
	require.Equal(t, 200, a.status, string(a.body))
	src, err = b.store.SourceGet(context.Background(), hostID, "github")
	require.NoError(t, err)
	require.Equal(t, []int64{0, 1, 604800000}, []int64{src.RetryDelays[0].Milliseconds(), src.RetryDelays[1].Milliseconds(), src.RetryDelays[2].Milliseconds()})
}

// TestDecodeErrorsNameFieldsNotGoTypes: a 400 for a body of the wrong shape
// names the field and the kind of JSON value it takes, on every route that
// decodes one.
func TestDecodeErrorsNameFieldsNotGoTypes(t *testing.T) {
	b := setup(t)
	hostID, token := b.newHost("h")
	admin := map[string]string{"Authorization": "Bearer " + testAdmin}
	bearer := map[string]string{"Authorization": "Bearer " + token}
	for _, c := range []struct {
		method, path, body string
		headers            map[string]string
		want               string
	}{
		{"PATCH", "/api/hosts/" + hostID, `{"rate_limit_per_min":"fast"}`, admin, "rate_limit_per_min must be a whole number"},
		{"POST", "/api/hosts", `{"name":5}`, admin, `field "name": want a string, got number`},
		{"POST", "/api/hosts", `["h"]`, admin, "request body: want an object, got array"},
		{"POST", "/api/hosts", `{"name":`, admin, "malformed JSON: the body ends before the value does"},
		{"POST", "/api/hosts", `{"name" "h"}`, admin, "malformed JSON at byte 9: invalid character '\"' after object key"},
		{"PUT", "/api/hosts/" + hostID + "/sources/github", `{"enabled":"yes"}`, admin, `field "enabled": want true or false, got string`},
		{"PUT", "/api/hosts/" + hostID + "/sources/github", `{"options":{"x":1}}`, admin, `field "options": want a string, got number`},
		{"PUT", "/api/hosts/" + hostID + "/sources/github", `{"events":"push"}`, admin, `field "events": want an array, got string`},
		{"POST", "/api/hosts/claim", `{"claim_code":7}`, nil, `field "claim_code": want a string, got number`},
		{"POST", "/api/hosts/heartbeat", `{"max_webhooks":"ten"}`, bearer, `field "max_webhooks": want a whole number, got string`},
		{"POST", "/api/hosts/heartbeat", `{"webhook_nacks":[{"retryable":"no"}]}`, bearer, `field "webhook_nacks.retryable": want true or false, got string`},
	} {
		a := b.do(c.method, c.path, strings.NewReader(c.body), c.headers)
		require.Equal(t, 400, a.status, "%s %s", c.path, string(a.body))
		var e shared.ErrorResponse
		a.json(t, &e)
		require.Contains(t, e.Error.Message, c.want, c.body)
		for _, goish := range []string{"Go ", "struct", "int", "float64", "[]", "map[", "shared.", "server.", "json:"} {
			require.NotContains(t, e.Error.Message, goish, c.body)
		}
	}
}
