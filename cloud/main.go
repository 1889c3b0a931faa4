// Command cloud is the relay's public side: it takes provider webhooks,
// verifies and stores them durably, and hands them to hosts that heartbeat in.
//
//	cloud serve     run the server (migrates first)
//	cloud migrate   apply database migrations and exit
//	cloud rekey     re-encrypt every stored secret with the first key
//	cloud version   print the version and the commit
//	cloud ctl       the operator's command line over the admin API
//	cloud backup    copy the SQLite database to a file, online
//	cloud health    is the server of these settings on this machine ready?
//
// Every setting is an environment variable and a flag of the same meaning;
// -h (or --help) of each command prints its usage and flags on stdout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/relaykit/relay/cloud/ctl"
	"github.com/relaykit/relay/shared/buildinfo"
)

const usage = `usage: cloud <command> [flags]

commands:
  serve     run the relay's cloud server (applies migrations first)
  migrate   apply database migrations and exit
  rekey     re-encrypt every stored secret (sources', alert sinks') with the first key of
            RELAY_SECRET_KEYS or RELAY_SECRET_KEYS_FILE
  backup    copy the SQLite database to a new file while the cloud runs
  health    ask the cloud serve of the same settings on this machine if it is ready (exit 0) or not (1)
  ctl       manage a running cloud: hosts, sources, deliveries, inspect, tail (cloud ctl -h)
  version   print the version and the commit it was built from

Run "cloud <command> -h" for the usage and flags of a command.
`

// commandInfo is what a command's -h says besides its flags.
type commandInfo struct {
	args  string // what follows "cloud NAME [flags]"
	about string
	serve bool // every setting of serve, not only the database's and the log's
	keys  bool // the key ring's settings too
}

// commands are the commands of settings; ctl and version have their own
// help.
var commands = map[string]commandInfo{
	"serve": {serve: true, about: `Runs the relay's cloud server on RELAY_LISTEN: provider intake, the host
protocol (heartbeats and sockets), the admin API and the console. Applies
pending database migrations first. SIGHUP reads RELAY_SECRET_KEYS_FILE and
the TLS certificate again; SIGINT or SIGTERM stops it gracefully.`},
	"migrate": {about: `Applies pending database migrations to RELAY_DATABASE_URL and exits
(cloud serve applies them too, at start).`},
	"rekey": {keys: true, about: `Re-encrypts every stored secret with the first key of the ring: source
secrets, alert sinks' URLs and signing secrets, and the key canary. The ring
is RELAY_SECRET_KEYS, or the file RELAY_SECRET_KEYS_FILE, or else the key
file in the data dir. Run it after a new key is first in the ring
and every cloud serve has it (SIGHUP with RELAY_SECRET_KEYS_FILE); then the
old key can be dropped. A source or sink no key in the ring opens is left as
it was and named, and the command exits 1.`},
	"backup": {args: " FILE", about: `Copies the SQLite database of RELAY_DATABASE_URL to FILE (new, 0600) while
the cloud runs: one consistent snapshot. Postgres is backed up with pg_dump.`},
	"health": {serve: true, about: `Asks the cloud serve of the same settings on this machine (RELAY_LISTEN,
and HTTPS when TLS is set) whether it is ready: GET /readyz. Exits 0 when
it is ready, 1 when it is not or does not answer. For container and
supervisor health checks.`},
}

// flagSet is the flag set of command name, its settings registered on o.
// It prints nothing itself: run prints -h on stdout and errors on stderr.
func (o *options) flagSet(name string) *flag.FlagSet {
	ci := commands[name]
	fs := flag.NewFlagSet("cloud "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.register(fs, ci.serve)
	o.registerSecretFiles(fs)
	if ci.keys {
		o.registerKeys(fs)
	}
	return fs
}

// secretFlags are the settings whose values -h never prints.
var secretFlags = map[string]bool{"admin-token": true, "secret-keys": true, "jwt-key": true}

// printHelp prints what -h of command name prints: its usage, what it
// does and its flags, with the defaults the environment gives them
// (secrets withheld, a database password redacted).
func printHelp(w io.Writer, name string) {
	ci := commands[name]
	fmt.Fprintf(w, "usage: cloud %s [flags]%s\n\n%s\n\n", name, ci.args, ci.about)
	fmt.Fprintf(w, "flags (each is also the environment variable named in parentheses; a flag wins):\n")
	var o options
	fs := o.flagSet(name)
	fs.VisitAll(func(f *flag.Flag) {
		switch {
		case secretFlags[f.Name] && f.DefValue != "":
			f.DefValue = ""
			f.Usage += " (set; not shown)"
		case f.Name == "database-url":
			f.DefValue = redactURL(f.DefValue)
		}
	})
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runIO(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is runIO with the process's stdout.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	return runIO(ctx, args, os.Stdout, stderr)
}

// runIO runs one command and returns the process's exit code: 0, 1 when
// the command failed, 2 when it was used wrongly (a bad flag or setting),
// with the reason written to stderr. -h prints on stdout and exits 0.
func runIO(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) < 1 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = serve(ctx, args[1:])
	case "migrate":
		err = migrate(ctx, args[1:])
	case "rekey":
		err = rekey(ctx, args[1:])
	case "ctl":
		return ctl.Run(ctx, args[1:], os.Stdin, stdout, stderr, os.Getenv)
	case "health":
		err = health(ctx, args[1:])
	case "backup":
		err = backup(ctx, args[1:])
	case "version", "-v", "--version":
		if len(args) > 1 && isHelp(args[1]) {
			fmt.Fprint(stdout, "usage: cloud version\n\nPrints the version, the commit it was built from, the Go version and the platform.\n")
			return 0
		}
		fmt.Fprintln(stdout, buildinfo.String("cloud"))
	case "-h", "--help", "-help", "help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "cloud: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) && errors.Is(ue.error, flag.ErrHelp) {
			printHelp(stdout, args[0])
			return 0
		}
		fmt.Fprintf(stderr, "cloud: %v\n", err)
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "(cloud %s -h for its usage and flags)\n", args[0])
			return 2
		}
		return 1
	}
	return 0
}

// usageError is a command used wrongly (a bad flag or setting): exit
// code 2.
type usageError struct{ error }
