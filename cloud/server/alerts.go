package server

import (
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/alert"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

func toAlertJSON(a *store.Alert) shared.Alert {
	v := shared.Alert{ID: a.ID, Rule: a.Rule, Key: a.Key, HostID: a.HostID, Source: a.Source, Summary: a.Summary,
		State: "firing", StartedAt: a.StartedAt, LastSentAt: a.LastSentAt, ResolvedAt: a.ResolvedAt}
	if a.ResolvedAt != nil {
		v.State = "resolved"
	}
	return v
}

// maxFiringShown bounds the firing alerts GET /api/alerts answers.
const maxFiringShown = 500

// listAlerts answers GET /api/alerts: the firing alerts (at most 500,
// newest first) and the history of every alert, newest first, a page of
// `limit` (1..500, default 50) after `cursor`.
func (s *Server) listAlerts(c *gin.Context) {
	ctx := c.Request.Context()
	limit, before, err := queryIDPage(c, 50, 500)
	if err != nil {
		s.writeError(c, err)
		return
	}
	firing, err := s.store.AlertList(ctx, &store.AlertListParams{Firing: true, Limit: maxFiringShown})
	if err != nil {
		s.writeError(c, err)
		return
	}
	history, err := s.store.AlertList(ctx, &store.AlertListParams{BeforeID: before, Limit: limit + 1})
	if err != nil {
		s.writeError(c, err)
		return
	}
	out := struct {
		Firing     []shared.Alert `json:"firing"`
		History    []shared.Alert `json:"history"`
		NextCursor string         `json:"next_cursor,omitempty"`
	}{Firing: make([]shared.Alert, 0, len(firing)), History: make([]shared.Alert, 0, len(history))}
	for _, a := range firing {
		out.Firing = append(out.Firing, toAlertJSON(a))
	}
	if len(history) > limit {
		history = history[:limit]
		out.NextCursor = strconv.FormatInt(history[len(history)-1].ID, 10)
	}
	for _, a := range history {
		out.History = append(out.History, toAlertJSON(a))
	}
	c.JSON(200, out)
}

// ruleSettingJSON is a rule's setting for a host ("" : every host). A
// threshold is in seconds for rules of durations, a count otherwise; 0 is
// the rule's default.
type ruleSettingJSON struct {
	HostID    string `json:"host_id,omitempty"`
	Disabled  bool   `json:"disabled"`
	Threshold *int64 `json:"threshold,omitempty"`
}

type ruleJSON struct {
	Name             string            `json:"name"`
	Help             string            `json:"help"`
	Unit             string            `json:"unit"` // seconds, count or none
	DefaultThreshold int64             `json:"default_threshold"`
	PerHost          bool              `json:"per_host"`
	Settings         []ruleSettingJSON `json:"settings"`
}

func unitOf(r alert.Rule) string {
	switch r.Unit {
	case alert.UnitDuration:
		return "seconds"
	case alert.UnitCount:
		return "count"
	}
	return "none"
}

// shown is a stored threshold as the API shows it.
func shown(r alert.Rule, t int64) int64 {
	if r.Unit == alert.UnitDuration {
		return t / 1000
	}
	return t
}

// listAlertRules answers GET /api/alerts/rules: the built-in rules, their
// defaults and the settings that override them.
func (s *Server) listAlertRules(c *gin.Context) {
	sets, err := s.store.AlertRuleList(c.Request.Context())
	if err != nil {
		s.writeError(c, err)
		return
	}
	out := make([]ruleJSON, 0, len(alert.Rules))
	for _, r := range alert.Rules {
		v := ruleJSON{Name: r.Name, Help: r.Help, Unit: unitOf(r), DefaultThreshold: shown(r, r.Default), PerHost: r.PerHost,
			Settings: []ruleSettingJSON{}}
		for _, set := range sets {
			if set.Rule != r.Name {
				continue
			}
			js := ruleSettingJSON{HostID: set.HostID, Disabled: set.Disabled}
			if set.Threshold > 0 {
				t := shown(r, set.Threshold)
				js.Threshold = &t
			}
			v.Settings = append(v.Settings, js)
		}
		out = append(out, v)
	}
	c.JSON(200, gin.H{"rules": out})
}

// ruleTarget is the rule and host (or "": every host) of a rule request.
func (s *Server) ruleTarget(c *gin.Context) (alert.Rule, string, error) {
	r, ok := alert.RuleNamed(c.Param("rule"))
	if !ok {
		return r, "", shared.NotFound("no such rule (GET /api/alerts/rules lists them)")
	}
	hostID := c.Param("id")
	if hostID == "" {
		return r, "", nil
	}
	if !r.PerHost {
		return r, "", shared.Invalid("rule " + r.Name + " is cloud-wide: set it with PUT /api/alerts/rules/" + r.Name)
	}
	if _, err := s.store.HostGet(c.Request.Context(), hostID); err != nil {
		return r, "", hostErr(err)
	}
	return r, hostID, nil
}

// putAlertRule answers PUT /api/alerts/rules/:rule (every host) and PUT
// /api/hosts/:id/alert-rules/:rule (one host): {"disabled", "threshold"}.
func (s *Server) putAlertRule(c *gin.Context) {
	r, hostID, err := s.ruleTarget(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	var req struct {
		Disabled  *bool  `json:"disabled"`
		Threshold *int64 `json:"threshold"`
	}
	if err := decodeJSON(c, 64<<10, &req); err != nil {
		s.writeError(c, err)
		return
	}
	set := &store.AlertRuleSetting{HostID: hostID, Rule: r.Name}
	if req.Disabled != nil {
		set.Disabled = *req.Disabled
	}
	if req.Threshold != nil {
		t := *req.Threshold
		switch {
		case r.Unit == alert.UnitNone:
			s.writeError(c, shared.Invalid("rule "+r.Name+" takes no threshold"))
			return
		case t < 0 || t > 366*24*3600:
			s.writeError(c, shared.Invalid("threshold must be 0 (the default) to 31622400"))
			return
		case r.Unit == alert.UnitDuration:
			t *= 1000
		}
		set.Threshold = t
	}
	if err := s.store.AlertRuleSet(c.Request.Context(), set); err != nil {
		s.writeError(c, err)
		return
	}
	js := ruleSettingJSON{HostID: hostID, Disabled: set.Disabled}
	if set.Threshold > 0 {
		t := shown(r, set.Threshold)
		js.Threshold = &t
	}
	c.JSON(200, js)
}

// deleteAlertRule removes a rule's setting: the defaults (or every host's
// setting) apply again.
func (s *Server) deleteAlertRule(c *gin.Context) {
	r, hostID, err := s.ruleTarget(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	if err := s.store.AlertRuleDelete(c.Request.Context(), hostID, r.Name); err != nil {
		s.writeError(c, err)
		return
	}
	c.Status(204)
}

func toSinkJSON(k *store.AlertSink) shared.AlertSink {
	return shared.AlertSink{ID: k.ID, Kind: k.Kind, Target: k.Target, CreatedAt: k.CreatedAt, Sent: k.Sent, Queued: k.Queued,
		Failures: k.Failures, FailingSince: k.FailingSince, LastError: k.LastError, LastErrorAt: k.LastErrorAt}
}

// maxSinks bounds the sinks: each notification is queued for every one.
const maxSinks = 20

// createSink answers POST /api/alerts/sinks {"kind", "url"}: the sink,
// with a webhook sink's signing secret shown this once.
func (s *Server) createSink(c *gin.Context) {
	ctx := c.Request.Context()
	var req struct {
		Kind string `json:"kind"`
		URL  string `json:"url"`
	}
	if err := decodeJSON(c, 64<<10, &req); err != nil {
		s.writeError(c, err)
		return
	}
	existing, err := s.store.AlertSinkList(ctx)
	if err != nil {
		s.writeError(c, err)
		return
	}
	if len(existing) >= maxSinks {
		s.writeError(c, shared.Invalid("at most 20 sinks: delete one first"))
		return
	}
	k, secret, err := alert.NewSink(s.ring, req.Kind, req.URL, s.cfg.AlertSinkAllow, s.now())
	if err != nil {
		s.writeError(c, shared.Invalid(err.Error()))
		return
	}
	if err := s.store.AlertSinkCreate(ctx, k); err != nil {
		s.writeError(c, err)
		return
	}
	s.log.Info("alert sink added", "sink", k.ID, "kind", k.Kind, "target", k.Target)
	v := toSinkJSON(k)
	v.Secret = secret
	c.JSON(201, v)
}

func (s *Server) listSinks(c *gin.Context) {
	ks, err := s.store.AlertSinkList(c.Request.Context())
	if err != nil {
		s.writeError(c, err)
		return
	}
	out := make([]shared.AlertSink, 0, len(ks))
	for _, k := range ks {
		out = append(out, toSinkJSON(k))
	}
	c.JSON(200, gin.H{"sinks": out})
}

func (s *Server) deleteSink(c *gin.Context) {
	err := s.store.AlertSinkDelete(c.Request.Context(), c.Param("sink"))
	if err != nil {
		s.writeError(c, notFoundAs(err, "no such sink"))
		return
	}
	c.Status(204)
}
