package cloudapi

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
	"github.com/relaykit/relay/shared/jsonwalk"
	"github.com/relaykit/relay/shared/sharedtest"
)

// binaryHooks have bodies empty, not UTF-8, with CRLF, and of 300 KB.
func binaryHooks() []shared.Webhook {
	at := time.Date(2026, 2, 16, 10, 0, 0, 123e6, time.UTC)
	big := bytes.Repeat([]byte("0123456789\r\n\xff"), 300<<10/13)
	return []shared.Webhook{
		{DeliveryID: "github:a:1", Source: "github", EventType: "push", Headers: map[string]string{"x-github-event": "push"}, RawBody: []byte{}, ReceivedAt: at, Attempt: 1},
		{DeliveryID: "stripe:b:1", Source: "stripe", EventType: "invoice", EventAction: "paid", Headers: map[string]string{"a": "é\"<&>"},
			RawBody: []byte("\x00\xfe\xff\r\nnot UTF-8"), ReceivedAt: at, Attempt: 3, CorrelationID: "c"},
		{DeliveryID: "github:c:1", Source: "github", Headers: map[string]string{}, Body: json.RawMessage(`{"a":1}`), RawBody: []byte("{\"a\":1}\r\n"), ReceivedAt: at, Attempt: 2},
		{DeliveryID: "github:d:1", Source: "github", Headers: map[string]string{}, RawBody: big, ReceivedAt: at, Attempt: 1},
	}
}

// binaryCloud answers heartbeats with what answer writes, as a cloud
// that reads Accept.
func binaryCloud(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) *Client {
	srv := httptest.NewServer(http.HandlerFunc(answer))
	t.Cleanup(srv.Close)
	return New(srv.URL, srv.Client(), "test")
}

// A host asks for the binary answer first and reads it: every field, the
// bodies byte-exact, the same as the JSON answer decodes to; with no
// webhooks too; and through a proxy that compressed it.
func TestHeartbeatReadsBinary(t *testing.T) {
	t.Parallel()
	resp := shared.HeartbeatResponse{Status: "ok", HeartbeatIntervalS: 30, More: true, Webhooks: binaryHooks(),
		Now: time.Date(2026, 2, 16, 10, 0, 1, 456e6, time.UTC), LeaseS: 120, PollWhileBusy: true}
	for _, tc := range []struct {
		name string
		resp shared.HeartbeatResponse
		gzip bool
	}{
		{"webhooks", resp, false},
		{"no webhooks", shared.HeartbeatResponse{Status: "ok", HeartbeatIntervalS: 30, Webhooks: []shared.Webhook{}, Now: resp.Now}, false},
		{"compressed on the way", resp, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := binaryCloud(t, func(w http.ResponseWriter, r *http.Request) {
				require.Equal(t, shared.MediaTypeWebhooksBinary+", application/json", r.Header.Get("Accept"))
				data, err := shared.AppendHeartbeatAnswer(nil, &tc.resp)
				require.NoError(t, err)
				w.Header().Set("Content-Type", shared.MediaTypeWebhooksBinary)
				if tc.gzip {
					w.Header().Set("Content-Encoding", "gzip")
					zw := gzip.NewWriter(w)
					zw.Write(data)
					zw.Close()
					return
				}
				w.Header().Set("Content-Length", strconv.Itoa(len(data)))
				w.Write(data)
			})
			got, err := c.Heartbeat(context.Background(), "tok", shared.HeartbeatRequest{})
			require.NoError(t, err)
			text, err := json.Marshal(tc.resp)
			require.NoError(t, err)
			var want shared.HeartbeatResponse
			require.NoError(t, json.Unmarshal(text, &want))
			require.Equal(t, want, got)
			for i, w := range tc.resp.Webhooks {
				require.Equal(t, w.RawBody, got.Webhooks[i].RawBody, "body %d byte-exact", i)
			}
		})
	}
}

// A cloud that predates binary answers ignores Accept and answers JSON
// (gzip-compressed): the host reads it by its Content-Type.
func TestHeartbeatReadsJSONOfAnOldCloud(t *testing.T) {
	t.Parallel()
	hooks := binaryHooks()
	c := binaryCloud(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		json.NewEncoder(zw).Encode(shared.HeartbeatResponse{Status: "ok", Webhooks: hooks})
		zw.Close()
	})
	got, err := c.Heartbeat(context.Background(), "tok", shared.HeartbeatRequest{})
	require.NoError(t, err)
	require.Len(t, got.Webhooks, len(hooks))
	for i, w := range hooks {
		require.Equal(t, w.RawBody, got.Webhooks[i].RawBody)
	}
}

// A binary answer that breaks its layout is a failed heartbeat, with a
// clear error, and nothing of it is returned.
func TestHeartbeatRefusesBrokenBinary(t *testing.T) {
	t.Parallel()
	good, err := shared.AppendHeartbeatAnswer(nil, &shared.HeartbeatResponse{Status: "ok", Webhooks: binaryHooks()[:3]})
	require.NoError(t, err)
	msg := func(js, bodies string) []byte {
		m := binary.BigEndian.AppendUint32(nil, uint32(len(js)))
		m = binary.BigEndian.AppendUint32(m, uint32(len(bodies)))
		return append(append(m, js...), bodies...)
	}
	for _, tc := range []struct {
		name    string
		data    []byte
		chunked bool // no Content-Length
		want    string
	}{
		{"raw_body in the JSON", msg(`{"status":"ok","webhooks":[{"raw_body":"eHk=","raw_body_len":2}]}`, "xy"), false, "carries raw_body"},
		{"length out of range", msg(`{"status":"ok","webhooks":[{"raw_body_len":3}]}`, "xy"), false, "out of range"},
		{"negative length", msg(`{"status":"ok","webhooks":[{"raw_body_len":-1}]}`, "x"), false, "out of range"},
		{"lengths not adding up", msg(`{"status":"ok","webhooks":[{"raw_body_len":1}]}`, "xy"), false, "add up to 1"},
		{"no length", msg(`{"status":"ok","webhooks":[{"delivery_id":"a"}]}`, ""), false, "has no raw_body_len"},
		{"malformed JSON", msg(`{"status":"ok","webhooks":[`, ""), false, "malformed JSON"},
		{"no JSON", msg("", ""), false, "no JSON"},
		{"longer than declared", append(bytes.Clone(good), 'x'), false, "declares"},
		{"shorter than declared", good[:len(good)-1], false, "declares"},
		{"longer, no length", append(bytes.Clone(good), 'x'), true, "longer than its header says"},
		{"shorter, no length", good[:len(good)-1], true, "ends in its bodies"},
		{"cut in the header", good[:5], true, "shorter than its header"},
		{"cut in the JSON", good[:20], true, "ends in its JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := binaryCloud(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", shared.MediaTypeWebhooksBinary)
				if tc.chunked {
					w.(http.Flusher).Flush()
				} else {
					w.Header().Set("Content-Length", strconv.Itoa(len(tc.data)))
				}
				w.Write(tc.data)
			})
			got, err := c.Heartbeat(context.Background(), "tok", shared.HeartbeatRequest{})
			require.ErrorIs(t, err, shared.ErrBadFrame)
			require.ErrorContains(t, err, "heartbeat: decode answer: ")
			require.ErrorContains(t, err, tc.want)
			require.Equal(t, shared.HeartbeatResponse{}, got)
		})
	}
}

// FuzzDecodeHeartbeatJSON: the walk of a binary heartbeat answer's JSON
// gives what shared.DecodeHeartbeatJSON gives, errors included.
//
//	go test -run '^$' -fuzz FuzzDecodeHeartbeatJSON -fuzztime 30s ./host/cloudapi/
func FuzzDecodeHeartbeatJSON(f *testing.F) {
	msg, err := shared.AppendHeartbeatAnswer(nil, &shared.HeartbeatResponse{Status: "ok", HeartbeatIntervalS: 1, More: true,
		Webhooks: binaryHooks()[:3], LeaseS: 60, PollWhileBusy: true})
	require.NoError(f, err)
	f.Add(msg[shared.WebhooksFrameHeader : shared.WebhooksFrameHeader+binary.BigEndian.Uint32(msg)])
	for _, s := range []string{`{}`, `null`, `[]`, `{"webhooks":null}`, `{"webhooks":[]}`, `{"webhooks":[null]}`, `{"webhooks":[{}]}`,
		`{"webhooks":[{"raw_body_len":0}]}`, `{"webhooks":[{"raw_body_len":-1}]}`, `{"webhooks":[{"raw_body_len":1,"raw_body":"YQ=="}]}`,
		`{"webhooks":[{"raw_body_len":1,"raw_body":null}]}`, `{"webhooks":[{"raw_body_len":1.0}]}`, `{"webhooks":[{"raw_body_len":null}]}`,
		`{"Webhooks":[{"Raw_Body_Len":3}]}`, `{"status":"o\u006b","more":true,"heartbeat_interval_s":30,"webhooks":[]}`,
		`{"now":"2026-02-16T10:00:00.5+01:00","lease_s":120}`, `{"now":null,"lease_s":"1"}`, `{"poll_while_busy":1}`,
		`{"webhooks":{}}`, `{"webhooks":[{"raw_body_len":12,"headers":{"a":"\u003c"}}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got shared.HeartbeatResponse
		lens, err := decodeHeartbeatJSON(data, &got)
		if !json.Valid(data) || jsonwalk.RepeatsNames(data) {
			return // no promise beyond not panicking
		}
		var want shared.HeartbeatResponse
		wantLens, wantErr := shared.DecodeHeartbeatJSON(data, &want)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("%q: decodeHeartbeatJSON error %v; shared's %v", data, err, wantErr)
		}
		if err == nil && (!reflect.DeepEqual(got, want) || !reflect.DeepEqual(lens, wantLens)) {
			t.Fatalf("%q:\nwalked %+v %v\nshared %+v %v", data, got, lens, want, wantLens)
		}
	})
}

// BenchmarkReadHeartbeatAnswer reads a heartbeat answer as send does, for
// the long poll's answer of one webhook of the payload mix and a drain's
// batch of 100 (scripts/bench/testdata in turn, one a 300 KB push):
// "json-gzip" gunzipped into the reused buffer and walked (what the cloud
// sends a host that asks gzip and not binary), "binary" as
// send reads it (shared.ReadHeartbeatAnswer).
//
//	go test -run '^$' -bench ReadHeartbeatAnswer -benchmem -benchtime 200x -count 3 ./host/cloudapi/
//
// Medians of three on 2 shared cores (load 2.3): one webhook 110 µs
// json-gzip, 34 µs binary; the batch of 100 (1.34 MB of bodies) 12.2 ms
// json-gzip, 2.1 ms binary.
func BenchmarkReadHeartbeatAnswer(b *testing.B) {
	for _, batch := range sharedtest.BenchBatches(b) {
		resp := shared.HeartbeatResponse{Status: "ok", HeartbeatIntervalS: 30, Webhooks: batch.Hooks, Now: time.Now(), LeaseS: 120, PollWhileBusy: true}
		var zipped bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&zipped, gzip.BestSpeed) // the cloud's level
		require.NoError(b, json.NewEncoder(zw).Encode(resp))
		require.NoError(b, zw.Close())
		bin, err := shared.AppendHeartbeatAnswer(nil, &resp)
		require.NoError(b, err)
		b.Run(batch.Name+"/json-gzip", func(b *testing.B) {
			b.SetBytes(int64(batch.Bytes))
			b.ReportAllocs()
			b.ReportMetric(float64(zipped.Len()), "answer-bytes")
			for range b.N {
				gz, err := getGzipReader(bytes.NewReader(zipped.Bytes()))
				require.NoError(b, err)
				buf := getAnswerBuffer()
				_, err = buf.ReadFrom(gz)
				require.NoError(b, err)
				var got shared.HeartbeatResponse
				require.NoError(b, decodeHeartbeat(buf.Bytes(), &got))
				putAnswerBuffer(buf)
				putGzipReader(gz)
				require.Len(b, got.Webhooks, len(batch.Hooks))
			}
		})
		b.Run(batch.Name+"/binary", func(b *testing.B) {
			b.SetBytes(int64(batch.Bytes))
			b.ReportAllocs()
			b.ReportMetric(float64(len(bin)), "answer-bytes")
			for range b.N {
				buf := getAnswerBuffer()
				var got shared.HeartbeatResponse
				require.NoError(b, shared.ReadHeartbeatAnswer(bytes.NewReader(bin), int64(len(bin)), maxResponse, buf, &got, decodeHeartbeatJSON))
				putAnswerBuffer(buf)
				require.Len(b, got.Webhooks, len(batch.Hooks))
			}
		})
	}
}
