// Command demo-receiver stands in for the local app behind a host in the
// `make run` demo: it prints every webhook the host forwards to it.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:3000", "address to listen on")
	flag.Parse()
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "read body", http.StatusBadRequest)
			return
		}
		sum := sha256.Sum256(body)
		preview := strings.ReplaceAll(string(body[:min(len(body), 120)]), "\n", " ")
		fmt.Printf("%s  receiver: %s %s  delivery=%s source=%s event=%s attempt=%s\n"+
			"           idempotency-key=%s  %d bytes  sha256=%s\n           signature=%s\n           body: %s…\n",
			time.Now().Format("15:04:05"), r.Method, r.URL.Path,
			r.Header.Get("X-Relay-Delivery-Id"), r.Header.Get("X-Relay-Source"), r.Header.Get("X-GitHub-Event"),
			r.Header.Get("X-Relay-Attempt"), r.Header.Get("Idempotency-Key"), len(body),
			hex.EncodeToString(sum[:8]), r.Header.Get("X-Hub-Signature-256"), preview)
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ok\n"))
	})
	// Listen before saying so: the line is the receiver's readiness.
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(os.Stderr, "demo receiver listening on http://%s\n", l.Addr())
	log.Fatal(srv.Serve(l))
}
