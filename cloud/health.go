package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"time"
)

// health asks the cloud serve of the same settings, on this machine,
// whether it is ready (GET /readyz): the health check of a container or a
// supervisor, where there may be no curl. It speaks HTTPS when serve
// does, without verifying the certificate: it only ever dials this
// machine, and sends nothing secret.
func health(ctx context.Context, args []string) error {
	o, _, err := parse("health", args)
	if err != nil {
		return err
	}
	host, port, _ := net.SplitHostPort(o.listen) // checked
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	scheme := "http"
	tc := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // a probe of this machine's own server
	if o.tlsOn() {
		scheme = "https"
		if d, _ := acmeDomains(o.acmeDomains); len(d) > 0 {
			tc.ServerName = d[0] // autocert answers only its domains
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	url := scheme + "://" + net.JoinHostPort(host, port) + "/readyz"
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("health: %s answered %s", url, resp.Status)
	}
	fmt.Println("ok")
	return nil
}
