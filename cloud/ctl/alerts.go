package ctl

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/relaykit/relay/shared"
)

func alertsList(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "alerts list [--limit N] [--cursor C] [--json]  (firing alerts, then the history, newest first)")
	limit := f.Int("limit", 50, "history entries, 1 to 500")
	cursor := f.String("cursor", "", "the next page of history")
	if _, err := f.parseAuthed(args, 0, 0, auth); err != nil {
		return err
	}
	q := pageQuery(*limit, *cursor)
	var out struct {
		Firing     []shared.Alert `json:"firing"`
		History    []shared.Alert `json:"history"`
		NextCursor string         `json:"next_cursor,omitempty"`
	}
	if done, err := e.fetch(ctx, "GET", "/api/alerts", q, nil, &out); done {
		return err
	}
	fmt.Fprintf(e.stdout, "%d firing\n", len(out.Firing))
	e.alertTable(out.Firing)
	fmt.Fprintln(e.stdout, "\nhistory")
	e.alertTable(out.History)
	if out.NextCursor != "" {
		fmt.Fprintf(e.stdout, "more: --cursor %s\n", out.NextCursor)
	}
	return nil
}

func (e *env) alertTable(as []shared.Alert) {
	rows := make([][]string, 0, len(as))
	for _, a := range as {
		rows = append(rows, []string{a.Rule, a.State, orDash(a.HostID), orDash(a.Source), e.ago(&a.StartedAt), e.ago(a.ResolvedAt), cut(a.Summary, 80)})
	}
	e.table([]string{"RULE", "STATE", "HOST", "SOURCE", "STARTED", "RESOLVED", "SUMMARY"}, rows)
}

func alertsRules(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "alerts rules [--json]  (every rule, its default and its settings)")
	if _, err := f.parseAuthed(args, 0, 0, auth); err != nil {
		return err
	}
	var out struct {
		Rules []struct {
			Name             string `json:"name"`
			Help             string `json:"help"`
			Unit             string `json:"unit"`
			DefaultThreshold int64  `json:"default_threshold"`
			PerHost          bool   `json:"per_host"`
			Settings         []struct {
				HostID    string `json:"host_id,omitempty"`
				Disabled  bool   `json:"disabled"`
				Threshold *int64 `json:"threshold,omitempty"`
			} `json:"settings"`
		} `json:"rules"`
	}
	if done, err := e.fetch(ctx, "GET", "/api/alerts/rules", nil, nil, &out); done {
		return err
	}
	rows := make([][]string, 0, len(out.Rules))
	for _, r := range out.Rules {
		var set []string
		for _, s := range r.Settings {
			who := "all hosts"
			if s.HostID != "" {
				who = s.HostID
			}
			what := "on"
			if s.Disabled {
				what = "off"
			}
			if s.Threshold != nil {
				what += " at " + strconv.FormatInt(*s.Threshold, 10)
			}
			set = append(set, who+": "+what)
		}
		def := "-"
		if r.Unit != "none" {
			def = strconv.FormatInt(r.DefaultThreshold, 10) + " " + r.Unit
		}
		rows = append(rows, []string{r.Name, def, strconv.FormatBool(r.PerHost), orDash(strings.Join(set, "; "))})
	}
	e.table([]string{"RULE", "DEFAULT", "PER HOST", "SETTINGS"}, rows)
	return nil
}

func rulePath(rule, hostID string) string {
	if hostID != "" {
		return "/api/hosts/" + url.PathEscape(hostID) + "/alert-rules/" + url.PathEscape(rule)
	}
	return "/api/alerts/rules/" + url.PathEscape(rule)
}

func alertsSetRule(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "alerts set-rule RULE [--host H] [--threshold N] [--off|--on] [--json]")
	hostID := f.String("host", "", "for this host only (default: every host)")
	threshold := f.Int64("threshold", -1, "the rule's threshold, in its unit (0: the default)")
	off := f.Bool("off", false, "turn the rule off")
	on := f.Bool("on", false, "turn the rule on")
	pos, err := f.parse(args, 1, 1)
	if err != nil {
		return err
	}
	if *off && *on {
		return usagef("alerts set-rule: --off or --on, not both")
	}
	body := map[string]any{"disabled": *off}
	if *threshold >= 0 {
		body["threshold"] = *threshold
	}
	if !*off && !*on && *threshold < 0 {
		return usagef("alerts set-rule: give --threshold, --off or --on")
	}
	if err := auth(); err != nil {
		return err
	}
	var out map[string]any
	if done, err := e.fetch(ctx, "PUT", rulePath(pos[0], *hostID), nil, body, &out); done {
		return err
	}
	fmt.Fprintf(e.stdout, "rule %s set\n", pos[0])
	return nil
}

func alertsResetRule(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "alerts reset-rule RULE [--host H]  (the defaults apply again)")
	hostID := f.String("host", "", "this host's setting (default: the setting of every host)")
	pos, err := f.parseAuthed(args, 1, 1, auth)
	if err != nil {
		return err
	}
	if err := e.client.do(ctx, "DELETE", rulePath(pos[0], *hostID), nil, nil, nil); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "rule %s reset\n", pos[0])
	return nil
}

func alertsSinks(ctx context.Context, e *env, args []string, auth func() error) error {
	type answer struct {
		Sinks []shared.AlertSink `json:"sinks"`
	}
	return listTable(ctx, e, args, auth, "alerts sinks [--json]", "/api/alerts/sinks", func(a *answer) []shared.AlertSink { return a.Sinks },
		[]string{"ID", "KIND", "TARGET", "SENT", "QUEUED", "FAILING SINCE", "LAST ERROR"}, func(k shared.AlertSink) []string {
			return []string{k.ID, k.Kind, k.Target, strconv.FormatInt(k.Sent, 10), strconv.Itoa(k.Queued),
				e.ago(k.FailingSince), orDash(cut(k.LastError, 60))}
		})
}

func alertsAddSink(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, `alerts add-sink webhook|slack --url-file FILE|- [--json]  (a Slack URL is a credential: never a flag's value)`)
	urlFile := f.String("url-file", "", `a file holding the sink's URL ("-": standard input)`)
	pos, err := f.parse(args, 1, 1)
	if err != nil {
		return err
	}
	if *urlFile == "" {
		return usagef("alerts add-sink: --url-file is required")
	}
	urls, err := readSecrets(e.stdin, *urlFile)
	if err != nil {
		return err
	}
	if len(urls) != 1 {
		return usagef("alerts add-sink: --url-file holds %d lines; want one URL", len(urls))
	}
	if err := auth(); err != nil {
		return err
	}
	var out shared.AlertSink
	if done, err := e.fetch(ctx, "POST", "/api/alerts/sinks", nil, map[string]string{"kind": pos[0], "url": urls[0]}, &out); done {
		return err
	}
	rows := [][]string{{"id", out.ID}, {"kind", out.Kind}, {"target", out.Target}}
	if out.Secret != "" {
		rows = append(rows, []string{"secret", out.Secret + "  (shown once: verify notifications with it)"})
	}
	e.table([]string{"FIELD", "VALUE"}, rows)
	return nil
}

func alertsRemoveSink(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "alerts remove-sink SINK_ID")
	pos, err := f.parseAuthed(args, 1, 1, auth)
	if err != nil {
		return err
	}
	if err := e.client.do(ctx, "DELETE", "/api/alerts/sinks/"+url.PathEscape(pos[0]), nil, nil, nil); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "sink %s removed\n", pos[0])
	return nil
}
