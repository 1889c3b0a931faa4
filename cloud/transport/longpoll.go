package transport

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
	"github.com/relaykit/relay/shared/steptime"
)

// Heartbeat applies a host's acks, nacks and extends, records that it is
// alive, and hands out its next batch of deliveries under a lease: the
// delivery core's Heartbeat, decoded from and encoded to the wire. The host
// id comes only from the verified token.
func (s *Transports) Heartbeat(c *gin.Context) {
	host, err := s.edge.AuthHost(c)
	if err != nil {
		s.edge.WriteError(c, err)
		return
	}
	var req shared.HeartbeatRequest
	if err := s.edge.DecodeJSON(c, s.cfg.MaxHeartbeatReq, &req); err != nil {
		s.edge.WriteError(c, err)
		return
	}
	if err := req.Validate(); err != nil {
		s.edge.WriteError(c, shared.Invalid(err.Error()))
		return
	}
	hb, err := fromWire(&req)
	if err != nil {
		s.edge.WriteError(c, err)
		return
	}
	ctx := c.Request.Context()
	res, err := s.deliveries.Heartbeat(ctx, host, hb)
	if err != nil {
		s.edge.WriteError(c, shared.Unavailable(err))
		return
	}
	defer s.holdOutgoing(res.Deliveries)()

	// more: available work was left over, cut by the batch's count or byte
	// bound; the host comes back at once.
	resp := shared.HeartbeatResponse{Status: "ok", HeartbeatIntervalS: s.IntervalS(), More: res.More, Webhooks: make([]shared.Webhook, 0, len(res.Deliveries)),
		Now: s.deliveries.Now(), LeaseS: int(s.deliveries.LeaseFor() / time.Second), PollWhileBusy: true}
	ids := make([]string, 0, len(res.Deliveries))
	for _, d := range res.Deliveries {
		ids = append(ids, d.ID)
		steptime.Stamp(d.Headers, "encoded", time.Now())
		resp.Webhooks = append(resp.Webhooks, toWire(d, !req.RawBodyOnly))
	}
	s.deliveries.Writing(host.ID, ids)
	encoding := encodingBinary
	if acceptsBinary(c.GetHeader("Accept")) {
		err = s.writeBinaryAnswer(c, &resp)
	} else {
		encoding = jsonEncoding(c.Request)
		err = s.writeJSON(c, 200, resp)
	}
	if err == nil {
		s.metrics.Wrote(TransportLongPoll, encoding, len(ids))
	} else {
		s.log.Warn("heartbeat response not written", "host", host.ID, "leased", len(ids), "err", err)
	}
	// The host may be gone by now: what follows is recorded regardless.
	s.deliveries.RecordWrite(ctx, host.ID, ids, err)
}

// fromWire is a heartbeat request as the delivery core takes it.
func fromWire(req *shared.HeartbeatRequest) (*delivery.Heartbeat, error) {
	hb := &delivery.Heartbeat{
		Report: delivery.Report{Acks: req.WebhookAcks, Extends: req.WebhookExtends,
			AnswerLost: req.AnswerLost, Held: req.WebhooksHeld, Stopping: req.Stopping},
		Beat: delivery.Beat{AgentVersion: shared.Truncate(req.AgentVersion, 100)},
		Max:  shared.DefaultMaxWebhooks,
		Wait: time.Duration(req.WaitS) * time.Second,
	}
	if len(req.WebhookNacks) > 0 {
		hb.Nacks = make([]delivery.Nack, len(req.WebhookNacks))
		for i, n := range req.WebhookNacks {
			hb.Nacks[i] = fromWireNack(n)
		}
	}
	for _, r := range req.WebhookResults {
		hb.Results = append(hb.Results, fromWireResult(r))
	}
	if req.Config != nil {
		sub, err := json.Marshal(req.Config)
		if err != nil {
			return nil, err
		}
		hb.Subscription = sub
	}
	if req.MaxWebhooks != nil {
		hb.Max = min(*req.MaxWebhooks, shared.MaxMaxWebhooks)
	}
	return hb, nil
}

// fromWireNack is a host's nack, from a heartbeat or a socket's report, as
// the delivery core reads it (its error bounded).
func fromWireNack(n shared.Nack) delivery.Nack {
	return delivery.Nack{ID: n.DeliveryID, Error: shared.Truncate(n.Error, 2000), Retryable: n.Retryable, Attempt: n.Attempt,
		NotStarted: n.NotStarted}
}

// fromWireResult is a host's result of a run, from a heartbeat or a
// socket's report, as the store keeps it.
func fromWireResult(r shared.WebhookResult) store.DeliveryResult {
	return store.DeliveryResult{DeliveryID: r.DeliveryID, Attempt: r.Attempt, Result: r.Result,
		Handler: r.Handler, ResponseStatus: r.ResponseStatus, ExitCode: r.ExitCode, DurationMS: r.DurationMS, Error: r.Error}
}

// toWire is a leased delivery as the host receives it; withBody adds the
// parsed copy of a JSON body.
func toWire(d *store.Delivery, withBody bool) shared.Webhook {
	w := shared.Webhook{
		DeliveryID: d.ID, Source: d.Source, EventType: d.EventType, EventAction: d.EventAction,
		Headers: d.Headers, RawBody: d.RawBody, ReceivedAt: d.ReceivedAt, Attempt: d.Attempts,
		CorrelationID: d.CorrelationID,
	}
	if w.Headers == nil {
		w.Headers = map[string]string{}
	}
	if w.RawBody == nil {
		w.RawBody = []byte{}
	}
	if withBody && json.Valid(d.RawBody) {
		w.Body = d.RawBody
	}
	return w
}

// acceptsBinary reports whether a heartbeat's Accept header lists the
// binary answer's media type (with a q other than 0).
func acceptsBinary(accept string) bool {
	for r := range strings.SplitSeq(accept, ",") {
		typ, params, _ := strings.Cut(r, ";")
		if !strings.EqualFold(strings.TrimSpace(typ), shared.MediaTypeWebhooksBinary) {
			continue
		}
		for p := range strings.SplitSeq(params, ";") {
			k, v, _ := strings.Cut(p, "=")
			if strings.EqualFold(strings.TrimSpace(k), "q") {
				if q, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && q == 0 {
					return false
				}
			}
		}
		return true
	}
	return false
}

// writeBinaryAnswer writes a heartbeat answer in the binary layout
// (shared.AppendHeartbeatAnswer), built in full in a pooled buffer and
// sent with its Content-Length and no compression: each body is copied
// once, into the answer. It reports whether the whole answer was written.
func (s *Transports) writeBinaryAnswer(c *gin.Context, r *shared.HeartbeatResponse) error {
	data, err := shared.AppendHeartbeatAnswer(frameBuffer(), r)
	if err != nil {
		return fmt.Errorf("write response: %w", err)
	}
	defer keepFrameBuffer(data)
	h := c.Writer.Header()
	h.Set("Content-Type", shared.MediaTypeWebhooksBinary)
	h.Set("Content-Length", strconv.Itoa(len(data)))
	h.Set("Vary", "Accept, Accept-Encoding")
	c.Writer.WriteHeader(200)
	if _, err := c.Writer.Write(data); err != nil {
		return fmt.Errorf("write response: %w", err)
	}
	return flush(c.Writer)
}

// writeJSON writes v, gzip-compressed when the client accepts it, and
// reports whether the whole answer was written.
//
// An answer up to MaxSizedAnswer is encoded in full first and sent with
// its Content-Length, so the host has all of it as soon as it is flushed:
// a streamed (chunked) answer ends only when the handler returns, and the
// heartbeat's handler still records the hand-out (a store commit) after
// writing, which the host would wait for before it could read its last
// byte. A larger answer is streamed from where the bound was passed.
func (s *Transports) writeJSON(c *gin.Context, status int, v any) error {
	c.Header("Content-Type", "application/json; charset=utf-8")
	// The answer's encoding follows Accept (binary or JSON) as well.
	c.Header("Vary", "Accept, Accept-Encoding")
	aw := newAnswerWriter(c.Writer, status)
	defer aw.release()
	var err error
	if jsonEncoding(c.Request) != encodingGzip {
		err = json.NewEncoder(aw).Encode(v)
	} else {
		c.Header("Content-Encoding", "gzip")
		zw := getGzipWriter(aw)
		if err = json.NewEncoder(zw).Encode(v); err == nil {
			err = zw.Close()
		}
		putGzipWriter(zw)
	}
	if err == nil {
		err = aw.finish()
	}
	if err != nil {
		return fmt.Errorf("write response: %w", err)
	}
	return flush(c.Writer)
}

// jsonEncoding is how writeJSON encodes an answer to r: encodingGzip when
// r accepts gzip, else encodingJSON.
func jsonEncoding(r *http.Request) string {
	if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		return encodingGzip
	}
	return encodingJSON
}

// MaxSizedAnswer bounds the answer held in memory to be sent with its
// length: a heartbeat answer of a few webhooks (the long poll's) is far
// below it; a drain's batch of megabytes streams past it.
const MaxSizedAnswer = 1 << 20

// answerWriter holds an answer until it is complete or passes
// MaxSizedAnswer, then writes it to w with its status.
type answerWriter struct {
	w         http.ResponseWriter
	status    int
	buf       *bytes.Buffer
	streaming bool // past the bound: the held part is written, the rest goes straight to w
}

func newAnswerWriter(w http.ResponseWriter, status int) *answerWriter {
	return &answerWriter{w: w, status: status, buf: answerBuffers.Get().(*bytes.Buffer)}
}

func (a *answerWriter) Write(p []byte) (int, error) {
	if !a.streaming {
		if a.buf.Len()+len(p) <= MaxSizedAnswer {
			return a.buf.Write(p)
		}
		a.streaming = true
		a.w.WriteHeader(a.status)
		if _, err := a.w.Write(a.buf.Bytes()); err != nil {
			return 0, err
		}
	}
	return a.w.Write(p)
}

// finish writes the held answer with its length, unless it streams.
func (a *answerWriter) finish() error {
	if a.streaming {
		return nil
	}
	a.w.Header().Set("Content-Length", strconv.Itoa(a.buf.Len()))
	a.w.WriteHeader(a.status)
	_, err := a.w.Write(a.buf.Bytes())
	return err
}

func (a *answerWriter) release() {
	a.buf.Reset()
	answerBuffers.Put(a.buf)
	a.buf = nil
}

// answerBuffers hold answers being sized; each holds at most
// MaxSizedAnswer (plus what one write brought past it is never held).
var answerBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// gzipWriters are reused: a new writer, even at the fastest level,
// allocates and clears its compressor's tables (about 1 MiB) for each
// answer.
var gzipWriters sync.Pool

func getGzipWriter(w io.Writer) *gzip.Writer {
	if zw, ok := gzipWriters.Get().(*gzip.Writer); ok {
		zw.Reset(w)
		return zw
	}
	// The fastest level: a batch of webhooks is megabytes of JSON, and the
	// cloud's CPU is what a draining host waits on.
	zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
	return zw
}

func putGzipWriter(zw *gzip.Writer) {
	zw.Reset(io.Discard) // hold no reference to the answer
	gzipWriters.Put(zw)
}

// flush sends what is buffered of the answer to the connection, so that a
// host that is gone shows as an error here rather than after the handler.
func flush(w http.ResponseWriter) error {
	for {
		if f, ok := w.(interface{ FlushError() error }); ok {
			if err := f.FlushError(); err != nil {
				return fmt.Errorf("write response: %w", err)
			}
			return nil
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
}
