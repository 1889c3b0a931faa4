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
	"net/http"
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

const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
	exitRevoked = 3
)

// synopses are each command's usage line, after "host NAME ": its own
// help (-h) starts with it, and the global usage lists them all.
var synopses = []struct{ name, synopsis, about string }{
	{"claim", "--cloud URL --code CODE|--code-file FILE [--state DIR] [--insecure-http]",
		"Exchanges a one-time claim code for this host's credential, stored in the state directory.\n" +
			"The code may come from --code-file or $RELAY_CLAIM_CODE instead, out of the process list.\n" +
			"A plain http:// cloud other than a loopback address is refused unless --insecure-http is given."},
	{"run", "--config FILE [--check [--offline]] [--state DIR] [--listen ADDR [--listen-public]]\n" +
		"           [--log-level LEVEL] [--insecure-http] [--other-cloud]",
		"Heartbeats the cloud, runs each webhook's handler and serves the local API.\n" +
			"--check validates the configuration and the credential with the cloud, compares the\n" +
			"configuration's sources with the cloud's (warnings), and exits (--check --offline: the\n" +
			"files alone). SIGHUP makes a running host reload its sources from the configuration file.\n" +
			"A local API address that is not loopback is refused unless --listen-public is given.\n" +
			cloudRule},
	{"ledger list", "[--result success|error|skipped] [--source NAME] [--since 1h|TIME]\n" +
		"                   [--limit N] [--cursor C] [--json] [--state DIR]",
		"Lists the ledger's rows, newest first."},
	{"ledger show", "DELIVERY_ID [--json] [--state DIR]", "Shows one ledger row: the handler's outcome and output."},
	{"reconcile", "[--since 24h|TIME] [--fix] [--json] [--state DIR]\n" +
		"                 [--cloud URL [--other-cloud]] [--insecure-http]",
		"Compares the ledger with the cloud's record of the deliveries received since, prints each\n" +
			"disagreement with what it means and what to do, and exits 4 when there is one;\n" +
			"--fix sends the acks the cloud is missing.\n" + cloudRule},
	{"health", "[--listen ADDR]", "Exits 0 when the running host's local API says it is well, else 1."},
	{"version", "", "Prints the host's version."},
}

// cloudRule is checkCloud's rule, as run's and reconcile's help say it.
const cloudRule = "The host's credential goes only to the cloud it was claimed from (credentials.json's\n" +
	"cloud_url) unless --other-cloud is given, and a plain http:// cloud other than a loopback\n" +
	"address is refused unless it is that cloud (claimed with --insecure-http) or --insecure-http\n" +
	"is given."

// synopsis is the usage line of command name ("ledger list").
func synopsis(name string) string {
	for _, s := range synopses {
		if s.name == name {
			return strings.TrimSpace("host " + s.name + " " + s.synopsis)
		}
	}
	panic("host: no synopsis of " + name)
}

var usage = func() string {
	var b strings.Builder
	b.WriteString("usage:\n")
	for _, s := range synopses {
		b.WriteString("  " + synopsis(s.name) + "\n")
	}
	b.WriteString(`
The state directory is --state, else $RELAY_HOST_STATE, else ~/.relay-host.
The local API listens on --listen, else $RELAY_HOST_LISTEN, else 127.0.0.1:7071.
run --check validates the configuration, and the credentials with the cloud
(--check --offline: the files alone), and exits.
reconcile compares the ledger with the cloud's record of the deliveries
received since, prints each disagreement with what it means and what to
do, and exits 4 when there is one; --fix sends the acks the cloud is missing.
claim, run and reconcile refuse a plain http:// cloud other than a loopback
address unless --insecure-http is given (run and reconcile accept the one
claim accepted); run and reconcile send the host's credential to no cloud
but the one it was claimed from unless --other-cloud is given.
run refuses a local API address that is not loopback unless --listen-public
is given.
SIGHUP makes a running host reload its sources from the configuration file.
health exits 0 when the running host's local API says it is well, else 1.
host COMMAND -h prints the command's own usage and flags.
`)
	return b.String()
}()

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// run is the whole command, with its surroundings passed in for tests.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	return dispatch(ctx, args, stdout, stderr, getenv, "host", "", map[string]command{
		"claim": runClaim, "run": runAgent, "ledger": runLedger, "reconcile": runReconcile, "health": runHealth,
		"version": runVersion, "-v": runVersion, "--version": runVersion,
		"-h": runHelp, "-help": runHelp, "--help": runHelp, "help": runHelp,
	})
}

// command is a command's entry: the arguments after its name, and the
// process's surroundings.
type command func(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int

// dispatch runs the command of cmds that args[0] names with the rest of
// args. Without arguments it prints missing and the usage on stderr; a name
// it does not know it reports under name ("host ledger").
func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string,
	name, missing string, cmds map[string]command) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, missing+usage)
		return exitUsage
	}
	if cmd, ok := cmds[args[0]]; ok {
		return cmd(ctx, args[1:], stdout, stderr, getenv)
	}
	fmt.Fprintf(stderr, "%s: unknown command %q\n%s", name, args[0], usage)
	return exitUsage
}

// runVersion is `host version`: the build's version, and the protocol
// version the host reports to the cloud (agent_version).
func runVersion(_ context.Context, args []string, stdout, _ io.Writer, _ func(string) string) int {
	if wantsHelp(args) {
		printHelp(stdout, "version", nil)
		return exitOK
	}
	fmt.Fprintln(stdout, buildinfo.String("host", "protocol "+agent.Version))
	return exitOK
}

// runHelp is `host help`: the usage, on stdout as asked.
func runHelp(_ context.Context, _ []string, stdout, _ io.Writer, _ func(string) string) int {
	fmt.Fprint(stdout, usage)
	return exitOK
}

// newFlagSet makes command name's flags. A flag that does not parse is
// reported on stderr with the command's usage line; -h or --help prints
// the command's usage and flags on stdout (flagExit).
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("host "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // flagExit says what is wanted
	return fs
}

// flagExit is the exit code of a command whose flags did not parse: -h
// (the command's usage and flags printed on stdout, as asked) is a
// success, anything else a usage error, its usage line on stderr.
func flagExit(fs *flag.FlagSet, err error, stdout io.Writer) int {
	name := strings.TrimPrefix(fs.Name(), "host ")
	if errors.Is(err, flag.ErrHelp) {
		printHelp(stdout, name, fs)
		return exitOK
	}
	fmt.Fprintf(fs.Output(), "usage: %s\n", synopsis(name))
	return exitUsage
}

// printHelp prints command name's usage line, what it does and its flags
// (fs nil: it has none).
func printHelp(w io.Writer, name string, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: %s\n\n", synopsis(name))
	for _, s := range synopses {
		if s.name == name {
			fmt.Fprintf(w, "%s\n", s.about)
		}
	}
	if fs == nil {
		return
	}
	fmt.Fprint(w, "\nflags:\n")
	fs.VisitAll(func(f *flag.Flag) {
		kind, help := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if kind != "" {
			line += " " + kind
		}
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
			help += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "%s\n      %s\n", line, help)
	})
}

// wantsHelp reports whether args ask for help (-h, -help, --help).
func wantsHelp(args []string) bool {
	return len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help")
}

func cloudClient() *http.Client {
	return &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
}

// claimCode takes the claim code from --code, else --code-file, else
// $RELAY_CLAIM_CODE: one of them only. The code is used once and expires,
// so a --code in the process list is worth little once the host is
// claimed; the other two keep it out of the list and of shell history.
func claimCode(code *string, file string, getenv func(string) string) error {
	fromEnv := getenv("RELAY_CLAIM_CODE")
	given := 0
	for _, v := range []string{*code, file, fromEnv} {
		if v != "" {
			given++
		}
	}
	if given > 1 {
		return errors.New("give the claim code once: --code, --code-file or $RELAY_CLAIM_CODE")
	}
	switch {
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("--code-file: %w", err)
		}
		*code = strings.TrimSpace(string(b))
	case fromEnv != "":
		*code = strings.TrimSpace(fromEnv)
	}
	return nil
}

func runClaim(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := newFlagSet("claim", stderr)
	cloudURL := fs.String("cloud", "", "URL of the relay cloud")
	code := fs.String("code", "", "one-time claim code (else $RELAY_CLAIM_CODE, or --code-file)")
	codeFile := fs.String("code-file", "", "file holding the claim code, kept out of the process list")
	stateFlag := fs.String("state", "", "state directory")
	consent := consentFlags(fs, false)
	if err := fs.Parse(args); err != nil {
		return flagExit(fs, err, stdout)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "host claim: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if err := claimCode(code, *codeFile, getenv); err != nil {
		fmt.Fprintf(stderr, "host claim: %v\n", err)
		return exitUsage
	}
	if *cloudURL == "" || *code == "" {
		fmt.Fprint(stderr, "host claim: --cloud and --code (or $RELAY_CLAIM_CODE, or --code-file) are required\n")
		return exitUsage
	}
	warnings, err := checkCloud("--cloud", *cloudURL, "", *consent)
	if err != nil {
		fmt.Fprintf(stderr, "host claim: %v\n", err)
		return exitUsage
	}
	for _, w := range warnings {
		fmt.Fprintf(stderr, "host claim: warning: %s\n", w)
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
