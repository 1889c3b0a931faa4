package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// arrival is one request a receiver got.
type arrival struct {
	at        time.Time
	key       string // Idempotency-Key
	eventID   string // X-GitHub-Delivery, as the provider sent it
	attempt   string // X-Relay-Attempt
	sigOK     bool   // the body verifies with this receiver's host's secret: byte for byte as sent
	bodyHost  string // the host the sender addressed the event to
	bodyEvent string
}

// receiver is the local app behind one host: it records every request by
// Idempotency-Key and answers 200.
type receiver struct {
	secret string
	url    string
	srv    *http.Server
	// delay, when set, is how long to take before answering (a handler at
	// work), so that a host killed at a random point is often mid-handler.
	delay func() time.Duration

	mu    sync.Mutex
	byKey map[string][]arrival
}

func (e *env) startReceiver(secret string) (*receiver, error) {
	rc := &receiver{secret: secret, byKey: map[string][]arrival{}}
	rc.srv = &http.Server{Handler: http.HandlerFunc(rc.serve), ReadHeaderTimeout: 10 * time.Second}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go rc.srv.Serve(l)
	e.onCleanup(func() { rc.srv.Close() })
	rc.url = "http://" + l.Addr().String() + "/hook"
	return rc, nil
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	a := arrival{at: time.Now(), key: r.Header.Get("Idempotency-Key"), eventID: r.Header.Get("X-GitHub-Delivery"),
		attempt: r.Header.Get("X-Relay-Attempt")}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(400)
		return
	}
	m := hmac.New(sha256.New, []byte(rc.secret))
	m.Write(b)
	a.sigOK = hmac.Equal([]byte(r.Header.Get("X-Hub-Signature-256")), []byte("sha256="+hex.EncodeToString(m.Sum(nil))))
	var body struct {
		Chaos struct {
			Event string `json:"event"`
			Host  string `json:"host"`
		} `json:"chaos"`
	}
	_ = json.Unmarshal(b, &body)
	a.bodyHost, a.bodyEvent = body.Chaos.Host, body.Chaos.Event
	rc.mu.Lock()
	rc.byKey[a.key] = append(rc.byKey[a.key], a)
	rc.mu.Unlock()
	if rc.delay != nil {
		time.Sleep(rc.delay())
	}
	w.WriteHeader(200)
	io.WriteString(w, "ok")
}

// snapshot copies what the receiver got so far.
func (rc *receiver) snapshot() map[string][]arrival {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := make(map[string][]arrival, len(rc.byKey))
	for k, v := range rc.byKey {
		out[k] = append([]arrival(nil), v...)
	}
	return out
}
