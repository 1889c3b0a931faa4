package server

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/openapi/openapitest"
	"github.com/relaykit/relay/cloud/transport"
	"github.com/relaykit/relay/shared"
)

// A heartbeat answer of a few webhooks is sent whole, with its length, so
// the host has it as soon as it is written (not once the handler has also
// recorded the hand-out); one past transport.MaxSizedAnswer streams, and reads the
// same.
func TestHeartbeatAnswerLength(t *testing.T) {
	b := setup(t)
	hostID, token := b.newHost("h")
	read := func(a answer) shared.HeartbeatResponse {
		t.Helper()
		require.Equal(t, 200, a.status, string(a.body))
		body := a.body
		if a.header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(bytes.NewReader(body))
			require.NoError(t, err)
			body, err = io.ReadAll(zr)
			require.NoError(t, err)
		}
		var hb shared.HeartbeatResponse
		require.NoError(t, json.Unmarshal(body, &hb))
		return hb
	}
	for i, gz := range []bool{true, false} {
		id := "small-" + strconv.Itoa(i)
		require.Equal(t, 200, b.sendGitHub(hostID, id, prBody).status)
		headers := map[string]string{"Authorization": "Bearer " + token, "Accept-Encoding": "identity"}
		if gz {
			headers["Accept-Encoding"] = "gzip"
		}
		a := b.do("POST", "/api/hosts/heartbeat", jsonBody(shared.HeartbeatRequest{RawBodyOnly: true}), headers)
		require.Equal(t, strconv.Itoa(len(a.body)), a.header.Get("Content-Length"), "gzip %v", gz)
		hb := read(a)
		require.Len(t, hb.Webhooks, 1)
		require.Equal(t, prBody, hb.Webhooks[0].RawBody)
		require.True(t, hb.PollWhileBusy)
	}

	// Bodies that do not compress, well past the bound together.
	var sent [][]byte
	for i := 0; i < 3; i++ {
		noise := make([]byte, transport.MaxSizedAnswer/2)
		_, _ = rand.Read(noise)
		body, err := json.Marshal(map[string]string{"action": "opened", "noise": base64.StdEncoding.EncodeToString(noise)})
		require.NoError(t, err)
		require.Equal(t, 200, b.sendGitHub(hostID, "large-"+strconv.Itoa(i), body).status)
		sent = append(sent, body)
	}
	a := b.do("POST", "/api/hosts/heartbeat", jsonBody(shared.HeartbeatRequest{RawBodyOnly: true}),
		map[string]string{"Authorization": "Bearer " + token, "Accept-Encoding": "gzip"})
	require.Empty(t, a.header.Get("Content-Length"), "streamed")
	require.Greater(t, len(a.body), transport.MaxSizedAnswer)
	hb := read(a)
	require.Len(t, hb.Webhooks, 3)
	for i, w := range hb.Webhooks {
		require.Equal(t, sent[i], w.RawBody)
	}
}

// binaryAccept is the Accept of a host that reads binary answers.
const binaryAccept = shared.MediaTypeWebhooksBinary + ", application/json"

// A heartbeat that accepts the binary media type is answered in it — with
// webhooks or without, whole, with its length, never compressed — and
// decodes to the deliveries the JSON answer carries; one that does not
// gets JSON as before. Each written webhook is counted by encoding.
func TestHeartbeatBinaryAnswer(t *testing.T) {
	doc, err := openapitest.Load()
	require.NoError(t, err)
	b := setup(t)
	hostID, token := b.newHost("h")
	hb := func(req shared.HeartbeatRequest, accept, encoding string) answer {
		t.Helper()
		headers := map[string]string{"Authorization": "Bearer " + token, "Accept-Encoding": encoding}
		if accept != "" {
			headers["Accept"] = accept
		}
		a := b.do("POST", "/api/hosts/heartbeat", jsonBody(req), headers)
		require.Equal(t, 200, a.status, string(a.body))
		return a
	}
	readBinary := func(a answer) shared.HeartbeatResponse {
		t.Helper()
		op, ok := doc.Match("POST", shared.PathHeartbeat)
		require.True(t, ok)
		require.NoError(t, doc.ValidateResponse(op, a.status, a.header.Get("Content-Type"), a.body), "documented")
		require.Equal(t, shared.MediaTypeWebhooksBinary, a.header.Get("Content-Type"))
		require.Empty(t, a.header.Get("Content-Encoding"), "bodies go as they are")
		require.Equal(t, "Accept, Accept-Encoding", a.header.Get("Vary"))
		require.Equal(t, strconv.Itoa(len(a.body)), a.header.Get("Content-Length"))
		var r shared.HeartbeatResponse
		require.NoError(t, shared.DecodeHeartbeatAnswer(a.body, &r, nil))
		return r
	}

	// No webhooks: binary all the same.
	empty := readBinary(hb(shared.HeartbeatRequest{}, binaryAccept, "gzip"))
	require.Equal(t, "ok", empty.Status)
	require.Empty(t, empty.Webhooks)
	require.True(t, empty.PollWhileBusy)
	require.Equal(t, 60, empty.LeaseS)
	require.Equal(t, b.clock.Now(), empty.Now.UTC())

	bodies := [][]byte{prBody, []byte(`{"action":"opened","text":"caf\u00e9\r\n"}`)}
	for i, body := range bodies {
		require.Equal(t, 200, b.sendGitHub(hostID, "ev-"+strconv.Itoa(i), body).status)
		b.clock.Advance(time.Millisecond)
	}
	got := readBinary(hb(shared.HeartbeatRequest{}, binaryAccept, "gzip"))
	require.Len(t, got.Webhooks, 2)
	for i, w := range got.Webhooks {
		require.Equal(t, bodies[i], w.RawBody, "byte-exact")
		require.JSONEq(t, string(bodies[i]), string(w.Body))
		require.Equal(t, 1, w.Attempt)
	}

	// The same deliveries again, as JSON (the host says it lost the
	// answer): the same webhooks but for the attempt.
	a := hb(shared.HeartbeatRequest{AnswerLost: true}, "application/json", "identity")
	require.Equal(t, "application/json; charset=utf-8", a.header.Get("Content-Type"))
	var again shared.HeartbeatResponse
	require.NoError(t, json.Unmarshal(a.body, &again))
	require.Len(t, again.Webhooks, 2)
	for i := range again.Webhooks {
		require.Equal(t, 2, again.Webhooks[i].Attempt)
		again.Webhooks[i].Attempt = 1
	}
	again.Now, got.Now = time.Time{}, time.Time{}
	require.Equal(t, again, got, "the binary answer decodes to the JSON answer's deliveries")

	// And once more as JSON, gzip-compressed (a host that compresses).
	a = hb(shared.HeartbeatRequest{AnswerLost: true}, "application/json", "gzip")
	require.Equal(t, "gzip", a.header.Get("Content-Encoding"))
	zr, err := gzip.NewReader(bytes.NewReader(a.body))
	require.NoError(t, err)
	var zipped shared.HeartbeatResponse
	require.NoError(t, json.NewDecoder(zr).Decode(&zipped))
	require.Len(t, zipped.Webhooks, 2)
	for i, w := range zipped.Webhooks {
		require.Equal(t, bodies[i], w.RawBody, "byte-exact")
	}

	// Not asked, or refused with q=0: JSON (gzip when asked).
	for _, accept := range []string{"", "application/json", shared.MediaTypeWebhooksBinary + ";q=0, application/json"} {
		a := hb(shared.HeartbeatRequest{}, accept, "gzip")
		require.Equal(t, "application/json; charset=utf-8", a.header.Get("Content-Type"), "Accept %q", accept)
		require.Equal(t, "gzip", a.header.Get("Content-Encoding"))
		require.Equal(t, "Accept, Accept-Encoding", a.header.Get("Vary"), "the encoding follows Accept too")
	}

	m := b.admin("GET", "/metrics", nil)
	require.Equal(t, 200, m.status)
	require.Contains(t, string(m.body), `relay_webhooks_sent_total{encoding="binary",transport="long_poll"} 2`)
	require.Contains(t, string(m.body), `relay_webhooks_sent_total{encoding="json",transport="long_poll"} 2`)
	require.Contains(t, string(m.body), `relay_webhooks_sent_total{encoding="gzip",transport="long_poll"} 2`)
	require.Contains(t, string(m.body), `relay_webhooks_sent_total{encoding="binary",transport="socket"} 0`)
	require.Contains(t, string(m.body), `relay_webhooks_sent_total{encoding="binary+deflate",transport="socket"} 0`)
	require.NotContains(t, string(m.body), `encoding="gzip",transport="socket"`, "only what a transport sends in")
}
