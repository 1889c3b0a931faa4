package ctl

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/relaykit/relay/shared"
)

func sourcePath(hostID, name string) string {
	return "/api/hosts/" + url.PathEscape(hostID) + "/sources/" + url.PathEscape(name)
}

func sourcesList(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "sources list HOST_ID [--json]")
	pos, err := f.parseAuthed(args, 1, 1, auth)
	if err != nil {
		return err
	}
	var out struct {
		Sources []shared.Source `json:"sources"`
	}
	if done, err := e.fetch(ctx, "GET", "/api/hosts/"+url.PathEscape(pos[0])+"/sources", nil, nil, &out); done {
		return err
	}
	rows := make([][]string, 0, len(out.Sources))
	for _, s := range out.Sources {
		rows = append(rows, []string{s.Name, s.Provider, strconv.FormatBool(s.Enabled), events(s.Events), strconv.Itoa(len(s.SecretFingerprints)), s.WebhookURL})
	}
	e.table([]string{"NAME", "PROVIDER", "ENABLED", "EVENTS", "SECRETS", "WEBHOOK URL"}, rows)
	return nil
}

// allowedIPs is a source's allowlist as shown: "*" for any address.
func allowedIPs(as []string) string {
	if len(as) == 0 {
		return "*"
	}
	return strings.Join(as, ",")
}

func events(es []string) string {
	if len(es) == 0 {
		return "*"
	}
	return strings.Join(es, ",")
}

func sourcesShow(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "sources show HOST_ID SOURCE [--json]")
	pos, err := f.parseAuthed(args, 2, 2, auth)
	if err != nil {
		return err
	}
	var s shared.Source
	if err := e.client.do(ctx, "GET", sourcePath(pos[0], pos[1]), nil, nil, &s); err != nil {
		return err
	}
	return e.printSource(s)
}

func (e *env) printSource(s shared.Source) error {
	if e.json {
		return e.printJSON(s)
	}
	sched := make([]string, len(s.RetrySchedule))
	for i, v := range s.RetrySchedule {
		sched[i] = strconv.FormatFloat(v, 'f', -1, 64)
	}
	opts := make([]string, 0, len(s.Options))
	for k, v := range s.Options {
		opts = append(opts, k+"="+v)
	}
	rows := [][]string{{"name", s.Name}, {"provider", s.Provider}}
	if s.Mode != "" { // a group's source
		rows = append(rows, []string{"mode", s.Mode})
	}
	e.table([]string{"FIELD", "VALUE"}, append(rows, [][]string{
		{"enabled", strconv.FormatBool(s.Enabled)}, {"events", events(s.Events)},
		{"secrets", orDash(strings.Join(s.SecretFingerprints, ", "))}, {"options", orDash(strings.Join(opts, ", "))},
		{"max body bytes", strconv.FormatInt(s.MaxBodyBytes, 10)}, {"retry schedule (s)", strings.Join(sched, ", ")},
		{"max attempts", strconv.Itoa(s.MaxAttempts)}, {"allowed ips", allowedIPs(s.AllowedIPs)}, {"webhook url", s.WebhookURL},
	}...))
	return nil
}

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

const sourcePutFlags = "[--provider P] [--events E,…] [--secrets-file FILE|-] [--retry-schedule 0,10,60] [--max-attempts N] [--max-body-bytes N] [--option K=V]… [--allowed-ips CIDR|IP|SET,…] [--disabled] [--json]  (replaces the source; omitted secrets keep the stored ones)"

func sourcesPut(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "sources put HOST_ID SOURCE "+sourcePutFlags)
	sf := addSourceFlags(f)
	pos, err := f.parse(args, 2, 2)
	if err != nil {
		return err
	}
	body, err := sf.body(e)
	if err != nil {
		return err
	}
	return e.putSource(ctx, auth, sourcePath(pos[0], pos[1]), body)
}

// sourceFlags are the flags that set a whole source (sources put, groups
// source-set).
type sourceFlags struct {
	provider, evs, secretsFile, schedule, allowed *string
	maxAttempts                                   *int
	maxBody                                       *int64
	disabled                                      *bool
	options                                       listFlag
}

func addSourceFlags(f *flags) *sourceFlags {
	sf := &sourceFlags{
		provider:    f.String("provider", "", "the provider (default: the source's name)"),
		evs:         f.String("events", "", "comma-separated events to take (default: every event)"),
		secretsFile: f.String("secrets-file", "", `a file of secrets, one a line ("-": standard input); never a flag's value`),
		schedule:    f.String("retry-schedule", "", "comma-separated seconds before each attempt, the first 0 (default: the cloud's)"),
		maxAttempts: f.Int("max-attempts", 0, "dead-letter after this many failed attempts (0: one per schedule entry)"),
		maxBody:     f.Int64("max-body-bytes", 0, "largest body taken (0: the provider's default)"),
		disabled:    f.Bool("disabled", false, "create or keep the source disabled"),
		allowed:     f.String("allowed-ips", "", "comma-separated CIDRs, IPs and IP set names webhooks may come from (default: any address)"),
	}
	f.Var(&sf.options, "option", "a provider option KEY=VALUE (repeatable)")
	return sf
}

// body is the source the flags set, as PUT takes it.
func (sf *sourceFlags) body(e *env) (map[string]any, error) {
	body := map[string]any{"enabled": !*sf.disabled, "max_attempts": *sf.maxAttempts, "max_body_bytes": *sf.maxBody}
	if *sf.provider != "" {
		body["provider"] = *sf.provider
	}
	if *sf.evs != "" {
		body["events"] = strings.Split(*sf.evs, ",")
	}
	if *sf.allowed != "" {
		body["allowed_ips"] = strings.Split(*sf.allowed, ",")
	}
	if *sf.schedule != "" {
		var sched []float64
		for _, v := range strings.Split(*sf.schedule, ",") {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return nil, usagef("--retry-schedule: %q is not a number of seconds", v)
			}
			sched = append(sched, n)
		}
		body["retry_schedule_s"] = sched
	}
	if len(sf.options) > 0 {
		opts := map[string]string{}
		for _, o := range sf.options {
			k, v, ok := strings.Cut(o, "=")
			if !ok || k == "" {
				return nil, usagef("--option %q: want KEY=VALUE", o)
			}
			opts[k] = v
		}
		body["options"] = opts
	}
	if *sf.secretsFile != "" {
		secrets, err := readSecrets(e.stdin, *sf.secretsFile)
		if err != nil {
			return nil, err
		}
		body["secrets"] = secrets
	}
	return body, nil
}

// putSource sends a whole source to path and prints what the cloud
// stored.
func (e *env) putSource(ctx context.Context, auth func() error, path string, body map[string]any) error {
	if err := auth(); err != nil {
		return err
	}
	var s shared.Source
	if err := e.client.do(ctx, "PUT", path, nil, body, &s); err != nil {
		return err
	}
	return e.printSource(s)
}

// readSecrets reads one secret a line from a file or stdin ("-").
func readSecrets(stdin io.Reader, file string) ([]string, error) {
	r := stdin
	if file != "-" {
		fh, err := os.Open(file)
		if err != nil {
			return nil, usagef("--secrets-file: %v", err)
		}
		defer fh.Close()
		r = fh
	}
	var out []string
	sc := bufio.NewScanner(io.LimitReader(r, 1<<20))
	for sc.Scan() {
		if s := strings.TrimSpace(sc.Text()); s != "" {
			out = append(out, s)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading secrets: %w", err)
	}
	if len(out) == 0 {
		return nil, usagef("--secrets-file %s holds no secret", file)
	}
	return out, nil
}

// changeSource changes some of a source's settings (PATCH): the others,
// its stored secrets among them, stay as they are.
func (e *env) changeSource(ctx context.Context, auth func() error, hostID, name string, patch map[string]any) error {
	if err := auth(); err != nil {
		return err
	}
	var s shared.Source
	if err := e.client.do(ctx, "PATCH", sourcePath(hostID, name), nil, patch, &s); err != nil {
		return err
	}
	return e.printSource(s)
}

func sourcesEnable(ctx context.Context, e *env, args []string, auth func() error) error {
	return sourceEnabled(ctx, e, args, auth, true)
}

func sourcesDisable(ctx context.Context, e *env, args []string, auth func() error) error {
	return sourceEnabled(ctx, e, args, auth, false)
}

func sourceEnabled(ctx context.Context, e *env, args []string, auth func() error, enabled bool) error {
	verb := "disable"
	if enabled {
		verb = "enable"
	}
	f := newFlags(e, "sources "+verb+" HOST_ID SOURCE [--json]")
	pos, err := f.parse(args, 2, 2)
	if err != nil {
		return err
	}
	return e.changeSource(ctx, auth, pos[0], pos[1], map[string]any{"enabled": enabled})
}

func sourcesEvents(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "sources events HOST_ID SOURCE [EVENT...] [--json]  (no event: every event)")
	pos, err := f.parse(args, 2, -1)
	if err != nil {
		return err
	}
	return e.changeSource(ctx, auth, pos[0], pos[1], map[string]any{"events": append([]string{}, pos[2:]...)})
}

func sourcesAllow(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "sources allow HOST_ID SOURCE [CIDR|IP|SET...] [--json]  (no entry: any address)")
	pos, err := f.parse(args, 2, -1)
	if err != nil {
		return err
	}
	return e.changeSource(ctx, auth, pos[0], pos[1], map[string]any{"allowed_ips": append([]string{}, pos[2:]...)})
}
