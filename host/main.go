// Command host is the relay's agent for one machine: `host claim` registers
// the machine with the cloud, `host run` heartbeats the cloud, runs each
// leased webhook's handler once per its local ledger and serves the local
// API, `host ledger` shows what the ledger recorded, and `host reconcile`
// compares the ledger with the cloud's record of the same deliveries.
//
// Exit codes: 0 ok or a clean stop on SIGTERM/SIGINT, 1 runtime failure,
// 2 usage or configuration error, 3 the cloud refuses the host's credential
// (deactivated or revoked: restarting will not help), 4 (reconcile) the
// ledger and the cloud disagree.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/relaykit/relay/host/agent"
	"github.com/relaykit/relay/host/cloudapi"
	"github.com/relaykit/relay/host/config"
	"github.com/relaykit/relay/shared"
	"github.com/relaykit/relay/shared/buildinfo"
)

// version and commit are set at build time with -ldflags "-X
// main.version=… -X main.commit=…" (make release); a build without them
// is the agent's protocol version.
var (
	version = agent.Version
	commit  = ""
)

const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
	exitRevoked = 3
)

const usage = `usage:
  host claim --cloud URL --code CODE [--state DIR] [--insecure-http]
  host run --config FILE [--check [--offline]] [--state DIR] [--listen ADDR] [--log-level LEVEL]
  host ledger list [--result success|error|skipped] [--source NAME] [--since 1h|TIME]
                   [--limit N] [--cursor C] [--json] [--state DIR]
  host ledger show DELIVERY_ID [--json] [--state DIR]
  host reconcile [--since 24h|TIME] [--fix] [--json] [--state DIR] [--cloud URL]
  host health [--listen ADDR]
  host version

The state directory is --state, else $RELAY_HOST_STATE, else ~/.relay-host.
The local API listens on --listen, else $RELAY_HOST_LISTEN, else 127.0.0.1:7071.
run --check validates the configuration, and the credentials with the cloud
(--check --offline: the files alone), and exits.
reconcile compares the ledger with the cloud's record of the deliveries
received since, prints each disagreement with what it means and what to
do, and exits 4 when there is one; --fix sends the acks the cloud is missing.
claim refuses a plain http:// cloud other than a loopback address unless
--insecure-http is given.
SIGHUP makes a running host reload its sources from the configuration file.
health exits 0 when the running host's local API says it is well, else 1.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// run is the whole command, with its surroundings passed in for tests.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "claim":
		return runClaim(ctx, args[1:], stdout, stderr, getenv)
	case "run":
		return runAgent(ctx, args[1:], stdout, stderr, getenv)
	case "ledger":
		return runLedger(ctx, args[1:], stdout, stderr, getenv)
	case "reconcile":
		return runReconcile(ctx, args[1:], stdout, stderr, getenv)
	case "health":
		return runHealth(ctx, args[1:], stdout, stderr, getenv)
	case "version", "-v", "--version":
		fmt.Fprintln(stdout, buildinfo.String("host", version, commit))
		return exitOK
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "host: unknown command %q\n%s", args[0], usage)
	return exitUsage
}

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("host "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	return fs
}

// flagExit is the exit code of a command whose flags did not parse: -h
// (usage printed as asked) is a success, anything else a usage error.
func flagExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitUsage
}

func cloudClient() *http.Client {
	return &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
}

// loopbackHost reports whether a URL's host is this machine: "localhost" or
// a loopback IP.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func runClaim(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := newFlagSet("claim", stderr)
	cloudURL := fs.String("cloud", "", "URL of the relay cloud")
	code := fs.String("code", "", "one-time claim code")
	stateFlag := fs.String("state", "", "state directory")
	insecure := fs.Bool("insecure-http", false, "allow a plain http:// cloud that is not on this machine")
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "host claim: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if *cloudURL == "" || *code == "" {
		fmt.Fprint(stderr, "host claim: --cloud and --code are required\n")
		return exitUsage
	}
	if err := config.CheckURL(*cloudURL); err != nil {
		fmt.Fprintf(stderr, "host claim: --cloud: %v\n", err)
		return exitUsage
	}
	if u, _ := url.Parse(*cloudURL); u.Scheme == "http" && !loopbackHost(u.Hostname()) {
		if !*insecure {
			fmt.Fprintf(stderr, "host claim: --cloud %s: plain http to another machine sends the claim code, "+
				"the host's credential and every webhook in clear; use https, or --insecure-http to accept that\n", u.Redacted())
			return exitUsage
		}
		fmt.Fprintf(stderr, "host claim: warning: --insecure-http: the claim code, the host's credential and every webhook "+
			"travel to %s in clear\n", u.Redacted())
	}
	dir, err := config.StateDir(*stateFlag, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "host claim: %v\n", err)
		return exitUsage
	}
	base := strings.TrimRight(*cloudURL, "/")

	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	client := cloudapi.New(base, cloudClient(), "relay-host/"+agent.Version)
	resp, err := client.Claim(ctx, shared.ClaimRequest{ClaimCode: *code, AgentVersion: agent.Version})
	if err != nil {
		var ce *cloudapi.Error
		if errors.As(err, &ce) {
			fmt.Fprintf(stderr, "host claim: the cloud refused the claim (%d): %s\n", ce.Status, ce.Message)
		} else {
			fmt.Fprintf(stderr, "host claim: %v\n", err)
		}
		return exitFailure
	}
	if resp.HostID == "" || resp.HostCredential == "" {
		fmt.Fprint(stderr, "host claim: the cloud's answer carries no host id or credential\n")
		return exitFailure
	}
	creds := config.Credentials{CloudURL: base, HostID: resp.HostID, HostCredential: resp.HostCredential}
	if err := config.WriteCredentials(dir, creds); err != nil {
		fmt.Fprintf(stderr, "host claim: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(stderr, "host claimed; credentials stored in %s\n", filepath.Join(dir, config.CredentialsFile))
	fmt.Fprintln(stdout, resp.HostID)
	return exitOK
}
