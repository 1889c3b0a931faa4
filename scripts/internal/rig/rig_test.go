package rig

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"testing"
	"time"
)

func TestGitHubSignature(t *testing.T) {
	// The example of GitHub's "Validating webhook deliveries" documentation.
	got := GitHubSignature("It's a Secret to Everybody", []byte("Hello, World!"))
	want := "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	if got != want {
		t.Fatalf("signature %s, want %s", got, want)
	}
	event, body := GitHubPayload()
	if event != "installation" || len(body) != 3329 {
		t.Fatalf("payload %s of %d bytes", event, len(body))
	}
	w := SignGitHub("s", event, "d-1", body)
	req, err := w.NewRequest(context.Background(), "http://x", "h_1", "github")
	if err != nil {
		t.Fatal(err)
	}
	if req.URL.Path != "/api/webhooks/h_1/github" || req.Header.Get("X-GitHub-Delivery") != "d-1" ||
		req.Header.Get("X-Hub-Signature-256") != GitHubSignature("s", body) {
		t.Fatalf("request %s %v", req.URL, req.Header)
	}
}

func TestNewDeliveryID(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	a, b := NewDeliveryID(), NewDeliveryID()
	if !re.MatchString(a) || a == b {
		t.Fatalf("ids %s %s", a, b)
	}
}

func TestReceiver(t *testing.T) {
	rc, err := StartReceiver(ReceiverOptions{HashBodies: true, Answer: func(_ *http.Request, key string, n int) int {
		if n == 1 && key == "k2" {
			return 503
		}
		return 200
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	post := func(key, body string) int {
		req, _ := http.NewRequest("POST", rc.URL, bytes.NewReader([]byte(body)))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("X-GitHub-Delivery", "ev-"+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := post("k1", "a"); s != 200 {
		t.Fatalf("status %d", s)
	}
	if s := post("k2", "b"); s != 503 {
		t.Fatalf("status %d", s)
	}
	if s := post("k2", "c"); s != 200 {
		t.Fatalf("status %d", s)
	}
	h, ok := rc.Get("k2")
	if !ok || h.Count != 2 || h.EventID != "ev-k2" || !h.Differs || h.Last.Before(h.First) {
		t.Fatalf("hit %+v", h)
	}
	if rc.Total() != 3 || rc.Unique() != 2 || rc.Duplicates() != 1 {
		t.Fatalf("total %d unique %d dup %d", rc.Total(), rc.Unique(), rc.Duplicates())
	}
}

func TestReadProc(t *testing.T) {
	s := StartSampler(os.Getpid(), 10*time.Millisecond)
	// Burn CPU until the process's own ticks have moved on: a fixed time
	// of spinning may get no tick of CPU on a loaded machine.
	from := s.Result().First.CPUTicks()
	for end := time.Now().Add(time.Minute); time.Now().Before(end); {
		if p, err := ReadProc(os.Getpid()); err == nil && p.CPUTicks() >= from+2 {
			break
		}
	}
	r := s.Stop()
	if r.Samples < 2 || r.PeakRSS <= 0 || r.CPU <= 0 {
		t.Fatalf("result %+v", r)
	}
	if _, err := ReadProc(-1); err == nil {
		t.Fatal("no error for pid -1")
	}
}

func TestTreeCPUTicks(t *testing.T) {
	cmd := exec.Command("sleep", "5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	kids, err := Descendants(os.Getpid())
	if err != nil || !slices.Contains(kids, cmd.Process.Pid) {
		t.Fatalf("descendants %v (%v) lack %d", kids, err, cmd.Process.Pid)
	}
	s, err := ReadProc(cmd.Process.Pid)
	if err != nil || s.PPID != os.Getpid() {
		t.Fatalf("ppid %d (%v)", s.PPID, err)
	}
	end := time.Now().Add(30 * time.Millisecond)
	for time.Now().Before(end) { // burn some CPU
	}
	if n, err := TreeCPUTicks(os.Getpid()); err != nil || n == 0 {
		t.Fatalf("ticks %d (%v)", n, err)
	}
}
