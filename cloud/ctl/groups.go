package ctl

import (
	"context"
	"fmt"
	"net/url"
	"strconv"

	"github.com/relaykit/relay/shared"
)

func groupPath(id string) string { return "/api/groups/" + url.PathEscape(id) }

func groupsList(ctx context.Context, e *env, args []string, auth func() error) error {
	type answer struct {
		Groups []shared.Group `json:"groups"`
	}
	return listTable(ctx, e, args, auth, "groups list [--json]", "/api/groups", func(a *answer) []shared.Group { return a.Groups },
		[]string{"ID", "NAME", "STATUS", "MEMBERS", "WEBHOOK URL"}, func(g shared.Group) []string {
			return []string{g.ID, g.Name, g.Status, strconv.Itoa(len(g.Members)), g.WebhookURL}
		})
}

func groupsShow(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "groups show GROUP_ID [--json]")
	pos, err := f.parseAuthed(args, 1, 1, auth)
	if err != nil {
		return err
	}
	var g shared.GroupDetail
	if done, err := e.fetch(ctx, "GET", groupPath(pos[0]), nil, nil, &g); done {
		return err
	}
	if err := e.printGroup(g.Group); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout)
	e.sourcesTable(g.Sources)
	return nil
}

// printGroup prints a group and its members in order.
func (e *env) printGroup(g shared.Group) error {
	if e.json {
		return e.printJSON(g)
	}
	e.table([]string{"FIELD", "VALUE"}, [][]string{
		{"id", g.ID}, {"name", g.Name}, {"status", g.Status}, {"rate limit", groupRateLimit(g)},
		{"created", stamp(&g.CreatedAt)}, {"webhook url", g.WebhookURL},
	})
	fmt.Fprintln(e.stdout)
	rows := make([][]string, 0, len(g.Members))
	for _, m := range g.Members {
		rows = append(rows, []string{strconv.Itoa(m.Position), m.HostID, m.Name, m.Status, e.memberPresence(m), e.ago(m.LastHeartbeatAt)})
	}
	e.table([]string{"POSITION", "HOST", "NAME", "STATUS", "PRESENCE", "LAST CONTACT"}, rows)
	return nil
}

// memberPresence is a member's presence as hosts list says it.
func (e *env) memberPresence(m shared.GroupMember) string {
	return e.presence(host{Status: m.Status, Claimed: m.Claimed, Presence: m.Presence})
}

// groupRateLimit says a group's own intake limit, each 0 as the cloud's
// default.
func groupRateLimit(g shared.Group) string {
	perMin, burst := "the cloud's default", "the cloud's default"
	if g.RateLimitPerMin > 0 {
		perMin = strconv.Itoa(g.RateLimitPerMin) + "/min"
	}
	if g.RateLimitBurst > 0 {
		burst = strconv.Itoa(g.RateLimitBurst)
	}
	return perMin + ", burst " + burst
}

func groupsCreate(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "groups create NAME [--per-min N] [--burst N] [--json]  (0: the cloud's default)")
	perMin := f.Int("per-min", 0, "webhooks a minute the group's intake takes (0: the cloud's default)")
	burst := f.Int("burst", 0, "burst of the rate limit (0: the cloud's default)")
	pos, err := f.parseAuthed(args, 1, 1, auth)
	if err != nil {
		return err
	}
	var g shared.Group
	req := shared.CreateGroupRequest{Name: pos[0], RateLimitPerMin: *perMin, RateLimitBurst: *burst}
	if err := e.client.do(ctx, "POST", "/api/groups", nil, req, &g); err != nil {
		return err
	}
	return e.printGroup(g)
}

func groupsRename(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "groups rename GROUP_ID NAME [--json]")
	pos, err := f.parse(args, 2, 2)
	if err != nil {
		return err
	}
	return e.patchGroup(ctx, auth, pos[0], map[string]any{"name": pos[1]})
}

func groupsLimits(ctx context.Context, e *env, args []string, auth func() error) error {
	return limits(ctx, e, args, auth, "group", e.patchGroup)
}

func (e *env) patchGroup(ctx context.Context, auth func() error, id string, patch map[string]any) error {
	if err := auth(); err != nil {
		return err
	}
	var g shared.Group
	if err := e.client.do(ctx, "PATCH", groupPath(id), nil, patch, &g); err != nil {
		return err
	}
	return e.printGroup(g)
}

func groupsDeactivate(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "groups deactivate GROUP_ID [--json]")
	pos, err := f.parseAuthed(args, 1, 1, auth)
	if err != nil {
		return err
	}
	var g shared.Group
	if err := e.client.do(ctx, "POST", groupPath(pos[0])+"/deactivate", nil, nil, &g); err != nil {
		return err
	}
	return e.printGroup(g)
}

func groupsAdd(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "groups add GROUP_ID HOST_ID [--position N] [--json]  (a member already there keeps its place)")
	position := f.Int("position", 0, "where the host goes among the members (0: after the last)")
	pos, err := f.parseAuthed(args, 2, 2, auth)
	if err != nil {
		return err
	}
	var g shared.Group
	path := groupPath(pos[0]) + "/members/" + url.PathEscape(pos[1])
	if err := e.client.do(ctx, "PUT", path, nil, shared.GroupMemberRequest{Position: *position}, &g); err != nil {
		return err
	}
	return e.printGroup(g)
}

func groupsRemove(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "groups remove GROUP_ID HOST_ID [--json]  (the group's fanout deliveries the host holds are cancelled)")
	pos, err := f.parseAuthed(args, 2, 2, auth)
	if err != nil {
		return err
	}
	var out shared.GroupMemberRemoved
	path := groupPath(pos[0]) + "/members/" + url.PathEscape(pos[1])
	if done, err := e.fetch(ctx, "DELETE", path, nil, nil, &out); done {
		return err
	}
	if err := e.printGroup(out.Group); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "\n%s left the group; %d of the group's fanout deliveries it held were cancelled (dead-lettered: `cloud ctl deliveries retry` sends one on).\n",
		pos[1], out.Cancelled)
	return nil
}

func groupsSources(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "groups sources GROUP_ID [--json]")
	pos, err := f.parseAuthed(args, 1, 1, auth)
	if err != nil {
		return err
	}
	var out struct {
		Sources []shared.Source `json:"sources"`
	}
	if done, err := e.fetch(ctx, "GET", groupPath(pos[0])+"/sources", nil, nil, &out); done {
		return err
	}
	e.sourcesTable(out.Sources)
	return nil
}

// sourcesTable lists a group's sources, a row each.
func (e *env) sourcesTable(srcs []shared.Source) {
	rows := make([][]string, 0, len(srcs))
	for _, s := range srcs {
		rows = append(rows, []string{s.Name, s.Provider, s.Mode, strconv.FormatBool(s.Enabled), events(s.Events),
			strconv.Itoa(len(s.SecretFingerprints)), s.WebhookURL})
	}
	e.table([]string{"NAME", "PROVIDER", "MODE", "ENABLED", "EVENTS", "SECRETS", "WEBHOOK URL"}, rows)
}

func groupsSourceSet(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "groups source-set GROUP_ID SOURCE --mode fanout|any "+sourcePutFlags)
	mode := f.String("mode", "", "fanout (every member gets each webhook) or any (one member at a time); required")
	sf := addSourceFlags(f)
	pos, err := f.parse(args, 2, 2)
	if err != nil {
		return err
	}
	if *mode != "fanout" && *mode != "any" {
		return usagef("groups source-set: --mode must be fanout or any")
	}
	body, err := sf.body(e)
	if err != nil {
		return err
	}
	body["mode"] = *mode
	return e.putSource(ctx, auth, groupPath(pos[0])+"/sources/"+url.PathEscape(pos[1]), body)
}
