// Command send-sample sends a signed GitHub pull_request webhook to the relay,
// exactly as GitHub would: the real payload, X-Hub-Signature-256 over its raw
// bytes, and a fresh X-GitHub-Delivery id.
package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

//go:embed pull_request.opened.json
var payload []byte

func main() {
	cloud := flag.String("cloud", "http://127.0.0.1:8080", "the relay's public URL")
	hostID := flag.String("host", "", "host id")
	source := flag.String("source", "github", "source name")
	secretFile := flag.String("secret-file", "", "file holding the source's webhook secret")
	secret := flag.String("secret", "", "the source's webhook secret (or use -secret-file)")
	delivery := flag.String("delivery", "", "X-GitHub-Delivery id (default: random); reuse one to see dedupe")
	flag.Parse()
	if *secretFile != "" {
		b, err := os.ReadFile(*secretFile)
		if err != nil {
			fail("read secret: %v", err)
		}
		*secret = strings.TrimSpace(string(b))
	}
	if *hostID == "" || *secret == "" {
		fail("usage: send-sample -cloud URL -host ID (-secret S | -secret-file F)")
	}
	if *delivery == "" {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		h := hex.EncodeToString(b)
		*delivery = h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
	}
	mac := hmac.New(sha256.New, []byte(*secret))
	mac.Write(payload)
	url := strings.TrimRight(*cloud, "/") + "/api/webhooks/" + *hostID + "/" + *source
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		fail("%v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "GitHub-Hookshot/demo")
	req.Header.Set("X-GitHub-Event", "pull_request")
	req.Header.Set("X-GitHub-Delivery", *delivery)
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		fail("send: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	// The status on stderr, the cloud's answer alone on stdout, so that a
	// script can read it: send-sample … | jq -r .delivery_id
	fmt.Fprintf(os.Stderr, "POST %s → %d\n", url, resp.StatusCode)
	fmt.Printf("%s\n", bytes.TrimSpace(body))
	if resp.StatusCode/100 != 2 {
		os.Exit(1)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "send-sample: "+format+"\n", args...)
	os.Exit(2)
}
