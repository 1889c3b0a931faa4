package shared

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// report is a report as a draining host writes it: n acks, each with its
// result.
func report(n int) []byte {
	f := Frame{Type: FrameReport, ID: 42, Extends: []string{"github:x:1"}}
	status := 200
	for i := range n {
		id := fmt.Sprintf("github:%08x-0000-4000-8000-000000000000:%d", i, 1795851690440+i)
		f.Acks = append(f.Acks, id)
		f.Results = append(f.Results, WebhookResult{DeliveryID: id, Attempt: 1, Result: "success",
			Handler: "forward http://127.0.0.1:3000/github", ResponseStatus: &status, DurationMS: 3})
	}
	b, err := json.Marshal(f)
	if err != nil {
		panic(err)
	}
	return b
}

// FuzzUnmarshalFrame holds UnmarshalFrame to json.Unmarshal: the same
// frame, or an error where that gives one.
func FuzzUnmarshalFrame(f *testing.F) {
	for _, seed := range []string{
		string(report(2)),
		`{"type":"report","id":1,"acks":[],"results":[],"extends":[],"stopping":true}`,
		`{"type":"report","acks":["a"],"results":[{"delivery_id":"a","attempt":-0,"response_status":null,"exit_code":0,"duration_ms":9007199254740993}]}`,
		`{"type":"report","acks":["a\u00e9"],"results":[{"delivery_id":"a","error":"line\nbreak"}]}`,
		`{"type":"report","nacks":[{"delivery_id":"a","error":"x","retryable":true}]}`,
		`{"type":"report","acks":["a"],"acks":["b"]}`,
		`{"TYPE":"report","Acks":["a"]}`,
		`{"type":"report","id":1.5}`, `{"type":"report","id":1e3}`, `{"type":"report","id":0123}`,
		`{"type":"report","id":123456789012345678901}`, `{"type":"report","results":[{"attempt":"1"}]}`,
		`{"type":"report","acks":null}`, `{"type":"report","stopping":truex}`, `{"type":"report"} x`,
		`{"type":"report",}`, `{}`, ` {"type" : "report" , "acks" : [ "a" , "b" ] } `, `null`, `[]`, ``,
		"{\"type\":\"r\xffe\"}", `{"type":"report","results":[{}]}`, `{"type":"welcome","now":"2026-11-28T07:00:00Z"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var got, want Frame
		gotErr := UnmarshalFrame(b, &got)
		wantErr := json.Unmarshal(b, &want)
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("%q: error %v, encoding/json's %v", b, gotErr, wantErr)
		}
		if wantErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %+v\nwant %+v", b, got, want)
		}
	})
}

// A host's report is read without reflection: the plain reading takes it
// whole.
func TestReportsAreReadPlainly(t *testing.T) {
	for _, b := range [][]byte{report(0), report(1), report(500),
		[]byte(`{"type":"report","id":7,"acks":["a"],"results":[{"delivery_id":"a","result":"error","exit_code":2,"duration_ms":4,"error":"exit status 2"}],"stopping":true}`)} {
		var f, want Frame
		require.True(t, plainReport(b, &f), "%.200s", b)
		require.NoError(t, json.Unmarshal(b, &want))
		require.Equal(t, want, f)
	}
	var f Frame
	require.False(t, plainReport([]byte(`{"type":"report","acks":["`+strings.Repeat("é", 3)+`\n"]}`), &f), "an escape")
}

func BenchmarkUnmarshalFrame(b *testing.B) {
	msg := report(500)
	for _, c := range []struct {
		name   string
		decode func([]byte, *Frame) error
	}{
		{"encoding-json", func(b []byte, f *Frame) error { return json.Unmarshal(b, f) }},
		{"frame", UnmarshalFrame},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(msg)))
			for b.Loop() {
				var f Frame
				if err := c.decode(msg, &f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
