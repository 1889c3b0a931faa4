package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/relaykit/relay/shared"
)

// Environment of every command.
const (
	EnvURL       = "RELAY_URL"
	EnvToken     = "RELAY_ADMIN_TOKEN"
	EnvTokenFile = "RELAY_ADMIN_TOKEN_FILE"
)

const usageHead = `usage: cloud ctl [--url URL [--insecure-http]] [--token-file FILE] <command> [flags] [args]

The admin token is read from $RELAY_ADMIN_TOKEN, or from the file named by
--token-file or $RELAY_ADMIN_TOKEN_FILE (never from a flag's value, which
would land in shell history). The cloud is --url or $RELAY_URL (default
http://127.0.0.1:8080); a plain http:// URL other than this machine
(localhost, a loopback address) is refused unless --insecure-http is given,
since the admin token would cross the network in clear. Every command takes
--json (print the API's JSON) and -h (its usage and flags).

global flags:
  --url URL          the cloud's base URL (default $RELAY_URL or http://127.0.0.1:8080)
  --insecure-http    accept a plain http:// URL to another machine (the admin token travels in clear)
  --token-file FILE  a file holding the admin token (default $RELAY_ADMIN_TOKEN_FILE)
  --json             print the API's JSON

commands:
`

const usageTail = `
exit codes: 0 ok, 1 failed (cloud unreachable or failing), 2 bad usage,
3 not found (or deactivated), 4 wrong or missing admin token, 5 conflict
(wrong state).
`

// usage is what `cloud ctl -h` prints: every command with its arguments
// and every flag it takes, as its own -h gives them.
func usage() string {
	var b strings.Builder
	b.WriteString(usageHead)
	for _, c := range commandList {
		if c.subs == nil {
			fmt.Fprintf(&b, "  %s\n", synopsis(c.run))
			continue
		}
		for _, sub := range c.subs {
			fmt.Fprintf(&b, "  %s\n", synopsis(sub.run))
		}
	}
	b.WriteString(usageTail)
	return b.String()
}

// synopsis is a command's usage line as its -h prints it, without
// "usage: cloud ctl ".
func synopsis(cmd command) string {
	var out strings.Builder
	_ = cmd(context.Background(), &env{stdout: &out, stderr: io.Discard}, []string{"-h"}, nil)
	line, _, _ := strings.Cut(out.String(), "\n")
	return strings.TrimPrefix(line, "usage: cloud ctl ")
}

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
	insecure := fs.Bool("insecure-http", false, "accept a plain http:// URL to another machine")
	asJSON := fs.Bool("json", false, "print JSON")
	args, err := hoistGlobals(args)
	if err != nil {
		fmt.Fprintf(stderr, "cloud ctl: %v\n", err)
		return ExitUsage
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage())
			return ExitOK
		}
		fmt.Fprintf(stderr, "cloud ctl: %v\n%s", err, usage())
		return ExitUsage
	}
	if fs.NArg() == 0 {
		fmt.Fprint(stderr, usage())
		return ExitUsage
	}
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv, now: time.Now, json: *asJSON}
	name, rest := fs.Arg(0), fs.Args()[1:]
	if name == "help" {
		fmt.Fprint(stdout, usage())
		return ExitOK
	}
	cmd, ok := lookup(name)
	if !ok {
		fmt.Fprintf(stderr, "cloud ctl: unknown command %q\n%s", name, usage())
		return ExitUsage
	}
	base, from := *urlFlag, "--url"
	if base == "" {
		base, from = getenv(EnvURL), "$"+EnvURL
	}
	if base == "" {
		base = "http://127.0.0.1:8080"
	}
	warning, err := checkURL(from, base, *insecure)
	if err != nil {
		fmt.Fprintf(stderr, "cloud ctl: %v\n", err)
		return ExitUsage
	}
	if warning != "" {
		fmt.Fprintf(stderr, "cloud ctl: warning: %s\n", warning)
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

// checkURL accepts the cloud's URL (from: where it was given) before the
// admin token is sent to it: http or https with a host, and plain http
// only to this machine ("localhost", a loopback IP) unless insecure
// (--insecure-http), which has it say the warning it returns.
func checkURL(from, base string, insecure bool) (warning string, err error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%s=%q: want http://… or https://…", from, base)
	}
	if u.Scheme == "https" || loopbackHost(u.Hostname()) {
		return "", nil
	}
	if !insecure {
		return "", fmt.Errorf("%s=%s: plain http to another machine sends the admin token in clear; "+
			"use https, or --insecure-http to accept that", from, u.Redacted())
	}
	return fmt.Sprintf("--insecure-http: the admin token travels to %s in clear", u.Redacted()), nil
}

// loopbackHost reports whether a URL's host is this machine: "localhost"
// or a loopback IP.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// hoistGlobals moves the global flags (--url, --token-file,
// --insecure-http) to the front, wherever they were given: `cloud ctl
// hosts list --url …` works too.
func hoistGlobals(args []string) ([]string, error) {
	var globals, rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || (name != "url" && name != "token-file" && name != "insecure-http") {
			rest = append(rest, a)
			continue
		}
		globals = append(globals, a)
		if !hasValue && name != "insecure-http" {
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

// entry is a command in the list: one that runs, or a group of them.
type entry struct {
	name string
	run  command
	subs []entry
}

// commandList is every command, in the order `cloud ctl -h` lists them.
var commandList []entry

func init() {
	commandList = []entry{
		{name: "hosts", subs: []entry{{"list", hostsList, nil}, {"show", hostsShow, nil}, {"create", hostsCreate, nil},
			{"rename", hostsRename, nil}, {"limits", hostsLimits, nil}, {"deactivate", hostsDeactivate, nil}, {"claim-code", hostsClaimCode, nil}}},
		{name: "sources", subs: []entry{{"list", sourcesList, nil}, {"show", sourcesShow, nil}, {"put", sourcesPut, nil},
			{"enable", sourcesEnable, nil}, {"disable", sourcesDisable, nil}, {"events", sourcesEvents, nil}, {"allow", sourcesAllow, nil}}},
		{name: "groups", subs: []entry{{"list", groupsList, nil}, {"show", groupsShow, nil}, {"create", groupsCreate, nil},
			{"rename", groupsRename, nil}, {"limits", groupsLimits, nil}, {"deactivate", groupsDeactivate, nil}, {"add", groupsAdd, nil},
			{"remove", groupsRemove, nil}, {"sources", groupsSources, nil}, {"source-set", groupsSourceSet, nil}}},
		{name: "ipsets", subs: []entry{{"list", ipsetsList, nil}, {"refresh", ipsetsRefresh, nil}}},
		{name: "deliveries", subs: []entry{{"list", deliveriesList, nil}, {"retry", deliveriesRetry, nil}, {"replay", deliveriesReplay, nil}, {"purge-dlq", deliveriesPurge, nil}}},
		{name: "inspect", run: inspect},
		{name: "tail", run: tail},
		{name: "rejections", run: rejections},
		{name: "quarantine", subs: []entry{{"list", quarantineList, nil}, {"release", quarantineRelease, nil}}},
		{name: "sessions", subs: []entry{{"end-all", sessionsEndAll, nil}}},
		{name: "alerts", subs: []entry{{"list", alertsList, nil}, {"rules", alertsRules, nil}, {"set-rule", alertsSetRule, nil},
			{"reset-rule", alertsResetRule, nil}, {"sinks", alertsSinks, nil}, {"add-sink", alertsAddSink, nil}, {"remove-sink", alertsRemoveSink, nil}}},
	}
	for i, c := range commandList {
		if c.subs != nil {
			commandList[i].run = group(c.name, c.subs)
		}
	}
}

// lookup finds a top-level command by name.
func lookup(name string) (command, bool) {
	for _, c := range commandList {
		if c.name == name {
			return c.run, true
		}
	}
	return nil, false
}

// group is a command with subcommands: -h lists each with its arguments
// and flags.
func group(name string, subs []entry) command {
	return func(ctx context.Context, e *env, args []string, auth func() error) error {
		if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || args[0] == "help" {
			names := make([]string, 0, len(subs))
			for _, sub := range subs {
				names = append(names, sub.name)
			}
			msg := fmt.Sprintf("usage: cloud ctl %s <%s> [flags] [args]\n", name, strings.Join(names, "|"))
			if len(args) == 0 {
				return usagef("%s", strings.TrimSpace(msg))
			}
			fmt.Fprint(e.stdout, msg+"\ncommands:\n")
			for _, sub := range subs {
				fmt.Fprintf(e.stdout, "  %s\n", synopsis(sub.run))
			}
			fmt.Fprintf(e.stdout, "\nRun \"cloud ctl %s <command> -h\" for a command's flags.\n", name)
			return flag.ErrHelp
		}
		i := slices.IndexFunc(subs, func(sub entry) bool { return sub.name == args[0] })
		if i < 0 {
			return usagef("unknown subcommand %q", args[0])
		}
		return subs[i].run(ctx, e, args[1:], auth)
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

// parseAuthed parses like parse, then reads the token with auth: a
// command's -h and usage errors need none.
func (f *flags) parseAuthed(args []string, min, max int, auth func() error) ([]string, error) {
	pos, err := f.parse(args, min, max)
	if err != nil {
		return nil, err
	}
	return pos, auth()
}

// pageQuery is the query of a page of a list: limit, and cursor when
// given (from the page before's next_cursor).
func pageQuery(limit int, cursor string) url.Values {
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	return q
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
// fetch sends a request and decodes the answer into out, then prints out as
// JSON when --json was given. done reports that the command is over: the
// request failed (err says why) or the JSON is printed.
func (e *env) fetch(ctx context.Context, method, path string, q url.Values, in, out any) (done bool, err error) {
	if err := e.client.do(ctx, method, path, q, in, out); err != nil {
		return true, err
	}
	if e.json {
		return true, e.printJSON(out)
	}
	return false, nil
}

// listTable is a command that takes no argument and lists what GET path
// answers: the answer as JSON under --json, else the items of it, a row
// each, under header.
func listTable[A, T any](ctx context.Context, e *env, args []string, auth func() error, usage, path string,
	items func(*A) []T, header []string, row func(T) []string) error {
	f := newFlags(e, usage)
	if _, err := f.parseAuthed(args, 0, 0, auth); err != nil {
		return err
	}
	var out A
	if done, err := e.fetch(ctx, "GET", path, nil, nil, &out); done {
		return err
	}
	list := items(&out)
	rows := make([][]string, 0, len(list))
	for _, it := range list {
		rows = append(rows, row(it))
	}
	e.table(header, rows)
	return nil
}

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

// since, stamp and orDash say times and missing values as the cloud's
// own prose does (shared.Since, …).
var (
	since  = shared.Since
	stamp  = shared.Stamp
	orDash = shared.OrDash
)
