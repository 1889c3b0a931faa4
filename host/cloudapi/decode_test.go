package cloudapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
	"github.com/relaykit/relay/shared/jsonwalk"
	"github.com/relaykit/relay/shared/sharedtest"
)

// answer is a heartbeat answer as the cloud encodes it, with n webhooks.
func answer(t testing.TB, n int, body []byte) []byte {
	resp := shared.HeartbeatResponse{Status: "ok", HeartbeatIntervalS: 1, More: true,
		Now: time.Date(2026, 2, 16, 10, 0, 1, 456e6, time.UTC), LeaseS: 120, PollWhileBusy: true}
	for i := range n {
		resp.Webhooks = append(resp.Webhooks, shared.Webhook{
			DeliveryID: fmt.Sprintf("github:72d3162e-%d:1707912345000", i), Source: "github",
			EventType: "pull_request", EventAction: "opened",
			Headers: map[string]string{"content-type": "application/json", "x-github-event": "pull_request",
				"x-github-delivery": fmt.Sprintf("72d3162e-%d", i), "x-hub-signature-256": "sha256=0123abcd",
				"link": "<https://api.github.com/x>; rel=\"next\" & more"},
			RawBody: body, ReceivedAt: time.Date(2026, 2, 16, 10, 0, 0, 123e6, time.UTC), Attempt: i%5 + 1,
			CorrelationID: fmt.Sprintf("corr-%d", i),
		})
	}
	var b bytes.Buffer
	if err := json.NewEncoder(&b).Encode(resp); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestDecodeHeartbeatAsTheCloudEncodes(t *testing.T) {
	data := answer(t, 3, []byte("{\"action\":\"opened\"}\n\x00\xff binary too"))
	var got, want shared.HeartbeatResponse
	require.NoError(t, decodeHeartbeat(data, &got))
	require.NoError(t, json.Unmarshal(data, &want))
	require.True(t, walkHeartbeat(data, new(shared.HeartbeatResponse)), "the walk reads the cloud's answers itself")
	require.Equal(t, want, got)
}

func TestDecodeFrameAsTheCloudEncodes(t *testing.T) {
	var hb shared.HeartbeatResponse
	require.NoError(t, json.Unmarshal(answer(t, 3, []byte("{}\n\x00\xff")), &hb))
	for _, f := range []shared.Frame{
		{Type: shared.FrameWebhooks, Webhooks: hb.Webhooks},
		{Type: shared.FrameConfirm, ID: 7},
		{Type: shared.FrameWelcome, HeartbeatIntervalS: 1, MaxCredit: 500},
	} {
		data, err := json.Marshal(f)
		require.NoError(t, err)
		var got, want shared.Frame
		require.NoError(t, decodeFrame(data, &got))
		require.NoError(t, json.Unmarshal(data, &want))
		require.Equal(t, want, got, f.Type)
	}
	for _, data := range []string{`{"type":"webhooks","webhooks":[{"attempt":"x"}]}`, `{"type":"webhooks","webhooks":{}}`, `{"type":1}`, `[`} {
		err := decodeFrame([]byte(data), new(shared.Frame))
		want := json.Unmarshal([]byte(data), new(shared.Frame))
		require.Error(t, want, data)
		require.EqualError(t, err, want.Error(), data)
	}
}

func TestDecodeHeartbeatErrorsAsEncodingJSON(t *testing.T) {
	for _, data := range []string{`{"webhooks":[{"attempt":"x"}]}`, `{"webhooks":{}}`, `{"more":1}`, `[`, `{"webhooks":[{"received_at":"yesterday"}]}`} {
		var got shared.HeartbeatResponse
		err := decodeHeartbeat([]byte(data), &got)
		want := json.Unmarshal([]byte(data), new(shared.HeartbeatResponse))
		require.Error(t, want, data)
		require.EqualError(t, err, want.Error(), data)
	}
}

// FuzzDecodeHeartbeat: on every valid JSON answer whose objects repeat no
// member name, decodeHeartbeat decodes what json.Unmarshal decodes, and
// fails where it fails.
func FuzzDecodeHeartbeat(f *testing.F) {
	f.Add(answer(f, 2, []byte(`{"a":1}`)))
	for _, s := range []string{`{}`, `null`, `[]`, `{"webhooks":null}`, `{"webhooks":[]}`, `{"webhooks":[null,{}]}`,
		`{"status":"o\u006b","more":true,"heartbeat_interval_s":30}`, `{"webhooks":[{"raw_body":"YWJj\/ZA=="}]}`,
		`{"webhooks":[{"raw_body":"YWJj"}]}`, `{"webhooks":[{"raw_body":"YWI="}]}`, `{"webhooks":[{"raw_body":null,"headers":null}]}`,
		`{"webhooks":[{"headers":{"a":null,"b":"\u003c"}}]}`, `{"webhooks":[{"headers":{"a":1}}]}`, `{"webhooks":[{"attempt":1.5}]}`,
		`{"webhooks":[{"attempt":-0}]}`, `{"webhooks":[{"received_at":"2026-02-16T10:00:00Z","body":{"x":[1]}}]}`,
		`{"webhooks":[{"received_at":null}]}`, `{"Webhooks":[{"Delivery_ID":"a"}]}`, `{"more":null,"status":null}`,
		`{"webhooks":[{"delivery_id":"\u00e9\ud83d\ude00"}]}`, `{"now":"2026-02-16T10:00:00.5+01:00","lease_s":120}`,
		`{"now":null,"lease_s":"1"}`, `{"poll_while_busy":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got shared.HeartbeatResponse
		err := decodeHeartbeat(data, &got)
		if !json.Valid(data) || jsonwalk.RepeatsNames(data) {
			return // no promise beyond not panicking
		}
		var want shared.HeartbeatResponse
		wantErr := json.Unmarshal(data, &want)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("%q: decodeHeartbeat error %v; json.Unmarshal %v", data, err, wantErr)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\ndecodeHeartbeat %+v\njson.Unmarshal  %+v", data, got, want)
		}
	})
}

// BenchmarkDecodeHeartbeat decodes a full batch (500 webhooks of a 3.3 KB
// body) the two ways.
func BenchmarkDecodeHeartbeat(b *testing.B) {
	data := answer(b, 500, bytes.Repeat([]byte(`{"action":"created","installation":{"id":1}}`), 75))
	b.Run("walk", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var r shared.HeartbeatResponse
			if err := decodeHeartbeat(data, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var r shared.HeartbeatResponse
			if err := json.Unmarshal(data, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzDecodeWebhooksJSON: the walk of a binary frame's JSON gives what
// shared.DecodeWebhooksJSON gives, errors included.
//
//	go test -run '^$' -fuzz FuzzDecodeWebhooksJSON -fuzztime 30s ./host/cloudapi/
func FuzzDecodeWebhooksJSON(f *testing.F) {
	msg, err := shared.AppendWebhooksFrame(nil, []shared.Webhook{{DeliveryID: "a", Headers: map[string]string{"X": "é"}, RawBody: []byte("xyz"), Attempt: 2},
		{DeliveryID: "b", Body: json.RawMessage(`{"a":1}`), RawBody: []byte(`{"a":1}`)}})
	require.NoError(f, err)
	f.Add(msg[shared.WebhooksFrameHeader : len(msg)-10])
	for _, s := range []string{`{}`, `null`, `[]`, `{"type":"webhooks"}`, `{"type":"webhooks","webhooks":null}`, `{"type":"webhooks","webhooks":[null]}`,
		`{"type":"webhooks","webhooks":[{}]}`, `{"type":"webhooks","webhooks":[{"raw_body_len":0}]}`, `{"type":"webhooks","webhooks":[{"raw_body_len":-1}]}`,
		`{"type":"webhooks","webhooks":[{"raw_body_len":1,"raw_body":"YQ=="}]}`, `{"type":"webhooks","webhooks":[{"raw_body_len":1,"raw_body":null}]}`,
		`{"type":"webhooks","webhooks":[{"raw_body_len":1.0}]}`, `{"type":"webhooks","webhooks":[{"raw_body_len":null}]}`, `{"Type":"webhooks","Webhooks":[{"Raw_Body_Len":3}]}`,
		`{"type":"confirm","webhooks":[]}`, `{"type":"webhook\u0073","webhooks":[{"raw_body_len":12,"headers":{"a":"\u003c"}}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		hooks, lens, err := decodeWebhooksJSON(data)
		if !json.Valid(data) || jsonwalk.RepeatsNames(data) {
			return // no promise beyond not panicking
		}
		wantHooks, wantLens, wantErr := shared.DecodeWebhooksJSON(data)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("%q: DecodeWebhooksJSON error %v; shared's %v", data, err, wantErr)
		}
		if err == nil && (!reflect.DeepEqual(hooks, wantHooks) || !reflect.DeepEqual(lens, wantLens)) {
			t.Fatalf("%q:\nwalked %+v %v\nshared %+v %v", data, hooks, lens, wantHooks, wantLens)
		}
	})
}

// BenchmarkDecodeWebhooksFrame decodes a webhooks frame of 100 webhooks of
// the bench's payloads (scripts/bench/testdata, in turn, one of them a
// 300 KB push) as the host does: "text" the JSON frame with base64 bodies
// (decodeFrame), "binary" the binary frame (decodeWebhooksJSON, bodies
// sliced out of the message).
//
//	go test -run '^$' -bench DecodeWebhooksFrame -benchmem -benchtime 200x -count 3 ./host/cloudapi/
func BenchmarkDecodeWebhooksFrame(b *testing.B) {
	hooks := sharedtest.BenchWebhooks(b, 100)
	total := 0
	for _, w := range hooks {
		total += len(w.RawBody)
	}
	text, err := json.Marshal(shared.Frame{Type: shared.FrameWebhooks, Webhooks: hooks})
	require.NoError(b, err)
	bin, err := shared.AppendWebhooksFrame(nil, hooks)
	require.NoError(b, err)
	b.Logf("%d bytes of bodies: text frame %d bytes, binary %d", total, len(text), len(bin))
	b.Run("text", func(b *testing.B) {
		b.SetBytes(int64(total))
		for range b.N {
			var f shared.Frame
			require.NoError(b, decodeFrame(text, &f))
			require.Len(b, f.Webhooks, 100)
		}
	})
	b.Run("binary", func(b *testing.B) {
		b.SetBytes(int64(total))
		for range b.N {
			got, err := shared.DecodeWebhooksFrame(bin, decodeWebhooksJSON)
			require.NoError(b, err)
			require.Len(b, got, 100)
		}
	})
}
