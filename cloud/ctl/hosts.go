package ctl

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/relaykit/relay/shared"
)

func hostsList(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "hosts list [--presence online|late|offline] [--limit N] [--cursor C] [--json]  (oldest first)")
	presence := f.String("presence", "", "only hosts of this presence: online, late or offline")
	limit := f.Int("limit", 100, "hosts, 1 to 500")
	cursor := f.String("cursor", "", "the next page")
	if _, err := f.parseAuthed(args, 0, 0, auth); err != nil {
		return err
	}
	q := pageQuery(*limit, *cursor)
	if *presence != "" {
		q.Set("presence", *presence)
	}
	var out struct {
		Hosts      []host `json:"hosts"`
		NextCursor string `json:"next_cursor,omitempty"`
	}
	if done, err := e.fetch(ctx, "GET", "/api/hosts", q, nil, &out); done {
		return err
	}
	rows := make([][]string, 0, len(out.Hosts))
	for _, h := range out.Hosts {
		rows = append(rows, []string{h.ID, h.Name, h.Status, e.presence(h), e.ago(h.LastHeartbeatAt), backlog(h), strconv.Itoa(h.Counts["dlq"])})
	}
	e.table([]string{"ID", "NAME", "STATUS", "PRESENCE", "LAST CONTACT", "BACKLOG", "DLQ"}, rows)
	if out.NextCursor != "" {
		fmt.Fprintf(e.stdout, "more: --cursor %s\n", out.NextCursor)
	}
	return nil
}

// presence is the cloud's judgement of a host (online, late, offline);
// "unclaimed" before its first claim, "-" once deactivated.
func (e *env) presence(h host) string {
	switch {
	case h.Status != "active":
		return "-"
	case !h.Claimed:
		return "unclaimed"
	}
	return orDash(h.Presence)
}

// backlog counts what waits for the host: queued, leased and retrying.
func backlog(h host) string {
	return strconv.Itoa(h.Counts["queued"] + h.Counts["delivering"] + h.Counts["delivered"] + h.Counts["retrying"])
}

func hostsShow(ctx context.Context, e *env, args []string, auth func() error) error {
	return hostCommand(ctx, e, args, auth, "hosts show HOST_ID [--json]", "GET", "", e.printHost)
}

// hostCommand is a command of one argument, HOST_ID, that sends method to
// that host's path with suffix ("/deactivate") and prints the answer with
// print.
func hostCommand[T any](ctx context.Context, e *env, args []string, auth func() error, usage, method, suffix string,
	print func(T) error) error {
	f := newFlags(e, usage)
	pos, err := f.parseAuthed(args, 1, 1, auth)
	if err != nil {
		return err
	}
	var out T
	if err := e.client.do(ctx, method, "/api/hosts/"+url.PathEscape(pos[0])+suffix, nil, nil, &out); err != nil {
		return err
	}
	return print(out)
}

func (e *env) printHost(h host) error {
	if e.json {
		return e.printJSON(h)
	}
	e.table([]string{"FIELD", "VALUE"}, [][]string{
		{"id", h.ID}, {"name", h.Name}, {"status", h.Status}, {"presence", e.presence(h)},
		{"last contact", e.ago(h.LastHeartbeatAt)}, {"agent", orDash(h.AgentVersion)},
		{"rate limit", rateLimit(h)},
		{"backlog", backlog(h)}, {"acked", strconv.Itoa(h.Counts["acked"])}, {"dlq", strconv.Itoa(h.Counts["dlq"])},
		{"webhook url", h.WebhookURL},
	})
	return nil
}

// rateLimit says a host's intake limit, naming the cloud's default where
// the host has no setting of its own (0): "the cloud's default (100/min,
// burst 100)", "60/min, burst 100 (the cloud's default)".
func rateLimit(h host) string {
	perMin := strconv.Itoa(h.RateLimit.PerMin) + "/min"
	burst := "burst " + strconv.Itoa(h.RateLimit.Burst)
	switch {
	case h.RateLimitPerMin == 0 && h.RateLimitBurst == 0:
		return "the cloud's default (" + perMin + ", " + burst + ")"
	case h.RateLimitPerMin == 0:
		perMin += " (the cloud's default)"
	case h.RateLimitBurst == 0:
		burst += " (the cloud's default)"
	}
	return perMin + ", " + burst
}

func hostsCreate(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "hosts create NAME [--json]")
	pos, err := f.parseAuthed(args, 1, 1, auth)
	if err != nil {
		return err
	}
	var out shared.CreateHostResponse
	if err := e.client.do(ctx, "POST", "/api/hosts", nil, shared.CreateHostRequest{Name: pos[0]}, &out); err != nil {
		return err
	}
	return e.printClaim(out)
}

func (e *env) printClaim(out shared.CreateHostResponse) error {
	if e.json {
		return e.printJSON(out)
	}
	e.table([]string{"FIELD", "VALUE"}, [][]string{
		{"id", out.ID}, {"name", out.Name}, {"claim code", out.ClaimCode}, {"claim expires", stamp(&out.ClaimExpiresAt)},
	})
	fmt.Fprintf(e.stdout, "\nOn the host, before the code expires:\n\n    %s\n", claimCommand(e.client.base, out.ClaimCode))
	return nil
}

// claimCommand is the command that claims a host with code, against the
// cloud ctl talks to (the console shows the same).
func claimCommand(cloud, code string) string {
	return "host claim --cloud " + cloud + " --code " + code
}

func hostsRename(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "hosts rename HOST_ID NAME [--json]")
	pos, err := f.parse(args, 2, 2)
	if err != nil {
		return err
	}
	return e.patchHost(ctx, auth, pos[0], map[string]any{"name": pos[1]})
}

func hostsLimits(ctx context.Context, e *env, args []string, auth func() error) error {
	return limits(ctx, e, args, auth, "host", e.patchHost)
}

// limits is `hosts limits` and `groups limits`: the intake rate limits of
// a host or group (kind), changed with patch.
func limits(ctx context.Context, e *env, args []string, auth func() error, kind string,
	patch func(ctx context.Context, auth func() error, id string, patch map[string]any) error) error {
	id := strings.ToUpper(kind) + "_ID"
	f := newFlags(e, kind+"s limits "+id+" [--per-min N] [--burst N] [--json]  (0: the cloud's default)")
	perMin := f.Int("per-min", -1, "webhooks a minute the "+kind+"'s intake takes (0: the cloud's default)")
	burst := f.Int("burst", -1, "burst of the rate limit (0: the cloud's default)")
	pos, err := f.parse(args, 1, 1)
	if err != nil {
		return err
	}
	changes := map[string]any{}
	if *perMin >= 0 {
		changes["rate_limit_per_min"] = *perMin
	}
	if *burst >= 0 {
		changes["rate_limit_burst"] = *burst
	}
	if len(changes) == 0 {
		return usagef("%ss limits: give --per-min, --burst or both", kind)
	}
	return patch(ctx, auth, pos[0], changes)
}

func (e *env) patchHost(ctx context.Context, auth func() error, id string, patch map[string]any) error {
	if err := auth(); err != nil {
		return err
	}
	var h host
	if err := e.client.do(ctx, "PATCH", "/api/hosts/"+url.PathEscape(id), nil, patch, &h); err != nil {
		return err
	}
	return e.printHost(h)
}

func hostsDeactivate(ctx context.Context, e *env, args []string, auth func() error) error {
	return hostCommand(ctx, e, args, auth, "hosts deactivate HOST_ID [--json]", "POST", "/deactivate", e.printHost)
}

func hostsClaimCode(ctx context.Context, e *env, args []string, auth func() error) error {
	return hostCommand(ctx, e, args, auth, "hosts claim-code HOST_ID [--json]", "POST", "/claim-code", e.printClaim)
}
