package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Environment of every command.
const (
	EnvURL       = "RELAY_URL"
	EnvToken     = "RELAY_ADMIN_TOKEN"
	EnvTokenFile = "RELAY_ADMIN_TOKEN_FILE"
)

const usage = `usage: cloud ctl [--url URL] [--token-file FILE] <command> [flags] [args]

The admin token is read from $RELAY_ADMIN_TOKEN, or from the file named by
--token-file or $RELAY_ADMIN_TOKEN_FILE (never from a flag's value, which
would land in shell history). The cloud is --url or $RELAY_URL (default
http://127.0.0.1:8080). Every command takes --json (print the API's JSON)
and -h.

commands:
  hosts list | show ID | create NAME | rename ID NAME | limits ID --per-min N [--burst N]
        | deactivate ID | claim-code ID
  sources list HOST | show HOST SOURCE | put HOST SOURCE [flags] | enable HOST SOURCE
        | disable HOST SOURCE | events HOST SOURCE [EVENT...]
  deliveries list [--host H] [--status S] [--provider P] [--event-id E] [--correlation-id C] [--since 24h]
        | retry DELIVERY_ID | purge-dlq HOST
  inspect ID          a webhook's whole life: ID is a delivery id, a provider event id or a correlation id
  tail                follow new deliveries and their transitions
  rejections HOST     refused intake requests
  quarantine list | release
  alerts list | rules | set-rule RULE [--host H] [--threshold N] [--off|--on] | reset-rule RULE [--host H]
        | sinks | add-sink webhook|slack --url-file FILE|- | remove-sink ID

exit codes: 0 ok, 1 failed (cloud unreachable or failing), 2 bad usage,
3 not found (or deactivated), 4 wrong or missing admin token, 5 conflict
(wrong state).
`

// env is what a command runs with.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	now            func() time.Time
	client         *client
	json           bool
}

// Run runs `cloud ctl` with args (after "ctl") and returns the exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("cloud ctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	urlFlag := fs.String("url", "", "the cloud's base URL (default $"+EnvURL+" or http://127.0.0.1:8080)")
	tokenFile := fs.String("token-file", "", "a file holding the admin token (default $"+EnvTokenFile+")")
	asJSON := fs.Bool("json", false, "print JSON")
	args, err := hoistGlobals(args)
	if err != nil {
		fmt.Fprintf(stderr, "cloud ctl: %v\n", err)
		return ExitUsage
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return ExitOK
		}
		fmt.Fprintf(stderr, "cloud ctl: %v\n%s", err, usage)
		return ExitUsage
	}
	if fs.NArg() == 0 {
		fmt.Fprint(stderr, usage)
		return ExitUsage
	}
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv, now: time.Now, json: *asJSON}
	name, rest := fs.Arg(0), fs.Args()[1:]
	if name == "help" {
		fmt.Fprint(stdout, usage)
		return ExitOK
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "cloud ctl: unknown command %q\n%s", name, usage)
		return ExitUsage
	}
	base, from := *urlFlag, "--url"
	if base == "" {
		base, from = getenv(EnvURL), "$"+EnvURL
	}
	if base == "" {
		base = "http://127.0.0.1:8080"
	}
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		fmt.Fprintf(stderr, "cloud ctl: %s=%q: want http://… or https://…\n", from, base)
		return ExitUsage
	}
	// The token is read only when a command runs, so that -h works without.
	e.client = newClient(base, "")
	tokenOnce := func() error {
		tok, err := readToken(getenv, *tokenFile)
		e.client.token = tok
		return err
	}
	err = cmd(ctx, e, rest, tokenOnce)
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "cloud ctl %s: %v\n", name, err)
		var ae *apiError
		if errors.As(err, &ae) && ae.Status == 401 {
			fmt.Fprintf(stderr, "check $%s (or --token-file): it must be the cloud's RELAY_ADMIN_TOKEN\n", EnvToken)
		}
	}
	return exitCode(err)
}

// hoistGlobals moves the global flags (--url, --token-file) to the front,
// wherever they were given: `cloud ctl hosts list --url …` works too.
func hoistGlobals(args []string) ([]string, error) {
	var globals, rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || (name != "url" && name != "token-file") {
			rest = append(rest, a)
			continue
		}
		globals = append(globals, a)
		if !hasValue {
			if i+1 >= len(args) {
				return nil, fmt.Errorf("flag needs an argument: %s", a)
			}
			i++
			globals = append(globals, args[i])
		}
	}
	return append(globals, rest...), nil
}

// readToken finds the admin token: $RELAY_ADMIN_TOKEN, else the token file.
func readToken(getenv func(string) string, file string) (string, error) {
	if file == "" {
		if tok := strings.TrimSpace(getenv(EnvToken)); tok != "" {
			return tok, nil
		}
		file = getenv(EnvTokenFile)
	}
	if file == "" {
		return "", usagef("no admin token: set $%s, or --token-file / $%s to a file holding it", EnvToken, EnvTokenFile)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", usagef("admin token file: %v", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", usagef("admin token file %s is empty", file)
	}
	return tok, nil
}

// command runs one command; auth reads the token before the first call.
type command func(ctx context.Context, e *env, args []string, auth func() error) error

var commands map[string]command

func init() {
	commands = map[string]command{
		"hosts":      group("hosts", map[string]command{"list": hostsList, "show": hostsShow, "create": hostsCreate, "rename": hostsRename, "limits": hostsLimits, "deactivate": hostsDeactivate, "claim-code": hostsClaimCode}),
		"sources":    group("sources", map[string]command{"list": sourcesList, "show": sourcesShow, "put": sourcesPut, "enable": sourcesEnable, "disable": sourcesDisable, "events": sourcesEvents}),
		"deliveries": group("deliveries", map[string]command{"list": deliveriesList, "retry": deliveriesRetry, "purge-dlq": deliveriesPurge}),
		"inspect":    inspect,
		"tail":       tail,
		"rejections": rejections,
		"quarantine": group("quarantine", map[string]command{"list": quarantineList, "release": quarantineRelease}),
		"alerts": group("alerts", map[string]command{"list": alertsList, "rules": alertsRules, "set-rule": alertsSetRule,
			"reset-rule": alertsResetRule, "sinks": alertsSinks, "add-sink": alertsAddSink, "remove-sink": alertsRemoveSink}),
	}
}

// group is a command with subcommands.
func group(name string, subs map[string]command) command {
	return func(ctx context.Context, e *env, args []string, auth func() error) error {
		if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			names := make([]string, 0, len(subs))
			for n := range subs {
				names = append(names, n)
			}
			slices.Sort(names)
			msg := fmt.Sprintf("usage: cloud ctl %s <%s> [flags] [args]\n", name, strings.Join(names, "|"))
			if len(args) == 0 {
				return usagef("%s", strings.TrimSpace(msg))
			}
			fmt.Fprint(e.stdout, msg)
			return flag.ErrHelp
		}
		sub, ok := subs[args[0]]
		if !ok {
			return usagef("unknown subcommand %q", args[0])
		}
		return sub(ctx, e, args[1:], auth)
	}
}

// flags is a command's flag set: -h prints its usage to stdout.
type flags struct {
	*flag.FlagSet
	e    *env
	use  string
	json *bool
}

func newFlags(e *env, use string) *flags {
	fs := flag.NewFlagSet(use, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := &flags{FlagSet: fs, e: e, use: use}
	f.json = fs.Bool("json", false, "print JSON")
	return f
}

// parse parses flags anywhere among the arguments and checks their count:
// between min and max positional arguments (max -1: any).
func (f *flags) parse(args []string, min, max int) ([]string, error) {
	var pos []string
	for {
		if err := f.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprintf(f.e.stdout, "usage: cloud ctl %s\n", f.use)
				f.SetOutput(f.e.stdout)
				f.PrintDefaults()
				return nil, err
			}
			return nil, usagef("%v (usage: cloud ctl %s)", err, f.use)
		}
		if f.NArg() == 0 {
			break
		}
		pos = append(pos, f.Arg(0))
		args = f.Args()[1:]
	}
	if len(pos) < min || (max >= 0 && len(pos) > max) {
		return nil, usagef("usage: cloud ctl %s", f.use)
	}
	if *f.json {
		f.e.json = true
	}
	return pos, nil
}

// printJSON prints v indented.
func (e *env) printJSON(v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table prints rows under a header, in aligned columns.
func (e *env) table(header []string, rows [][]string) { tableTo(e.stdout, header, rows) }

func tableTo(w io.Writer, header []string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

// ago says how long before now t was, to the second ("-" for nil).
func (e *env) ago(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return since(e.now(), *t)
}

func since(now, t time.Time) string {
	d := now.Sub(t).Round(time.Second)
	switch {
	case d < 0:
		return "in " + (-d).String()
	case d == 0:
		return "now"
	}
	return d.String() + " ago"
}

func stamp(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
