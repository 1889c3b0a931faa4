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

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
)

// A heartbeat answer of a few webhooks is sent whole, with its length, so
// the host has it as soon as it is written (not once the handler has also
// recorded the hand-out); one past maxSizedAnswer streams, and reads the
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
		noise := make([]byte, maxSizedAnswer/2)
		_, _ = rand.Read(noise)
		body, err := json.Marshal(map[string]string{"action": "opened", "noise": base64.StdEncoding.EncodeToString(noise)})
		require.NoError(t, err)
		require.Equal(t, 200, b.sendGitHub(hostID, "large-"+strconv.Itoa(i), body).status)
		sent = append(sent, body)
	}
	a := b.do("POST", "/api/hosts/heartbeat", jsonBody(shared.HeartbeatRequest{RawBodyOnly: true}),
		map[string]string{"Authorization": "Bearer " + token, "Accept-Encoding": "gzip"})
	require.Empty(t, a.header.Get("Content-Length"), "streamed")
	require.Greater(t, len(a.body), maxSizedAnswer)
	hb := read(a)
	require.Len(t, hb.Webhooks, 3)
	for i, w := range hb.Webhooks {
		require.Equal(t, sent[i], w.RawBody)
	}
}
