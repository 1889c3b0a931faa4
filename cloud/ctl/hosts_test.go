package ctl

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
)

// TestRateLimitShown: a host's 0 is said as the cloud's default, with the
// value it stands for, never as "0/min, burst 0".
func TestRateLimitShown(t *testing.T) {
	limited := func(own, ownBurst, perMin, burst int) host {
		h := host{RateLimitPerMin: own, RateLimitBurst: ownBurst}
		h.RateLimit.PerMin, h.RateLimit.Burst = perMin, burst
		return h
	}
	require.Equal(t, "the cloud's default (100/min, burst 100)", rateLimit(limited(0, 0, 100, 100)))
	require.Equal(t, "60/min, burst 100 (the cloud's default)", rateLimit(limited(60, 0, 60, 100)))
	require.Equal(t, "100/min (the cloud's default), burst 5", rateLimit(limited(0, 5, 100, 5)))
	require.Equal(t, "60/min, burst 5", rateLimit(limited(60, 5, 60, 5)))

	var out bytes.Buffer
	e := &env{stdout: &out, now: func() time.Time { return now }}
	require.NoError(t, e.printHost(limited(0, 0, 100, 100)))
	require.Regexp(t, `rate limit +the cloud's default \(100/min, burst 100\)\n`, out.String())
}

// TestClaimPrinted: hosts create and hosts claim-code print the command
// that claims the host, against the cloud ctl talks to, as the console
// shows it.
func TestClaimPrinted(t *testing.T) {
	var out bytes.Buffer
	e := &env{stdout: &out, client: newClient("https://relay.example.com/", "")}
	require.NoError(t, e.printClaim(shared.CreateHostResponse{ID: "h_1", Name: "laptop", ClaimCode: "ABCD-EFGH", ClaimExpiresAt: now}))
	require.Contains(t, out.String(), "\n    host claim --cloud https://relay.example.com --code ABCD-EFGH\n")

	out.Reset()
	e.json = true
	require.NoError(t, e.printClaim(shared.CreateHostResponse{ID: "h_1", ClaimCode: "ABCD-EFGH"}))
	require.NotContains(t, out.String(), "host claim", "--json prints the API's JSON only")
}
