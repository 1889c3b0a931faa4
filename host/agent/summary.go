package agent

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/relaykit/relay/shared"
)

// summarize says in a few words what a webhook is about, from the fields
// common providers carry: a repository and PR or issue number, a Slack channel
// and thread, a Stripe object. It falls back to the event type.
func summarize(w shared.Webhook) string {
	body := []byte(w.Body)
	if len(body) == 0 {
		body = w.RawBody
	}
	var p struct {
		Repository struct {
			FullName string `json:"full_name"`
		} `json:"repository"`
		Number      json.Number `json:"number"`
		PullRequest struct {
			Number json.Number `json:"number"`
		} `json:"pull_request"`
		Issue struct {
			Number json.Number `json:"number"`
		} `json:"issue"`
		Ref   string `json:"ref"`
		Event struct {
			Channel  string `json:"channel"`
			ThreadTS string `json:"thread_ts"`
			TS       string `json:"ts"`
		} `json:"event"`
		Type string `json:"type"`
		Data struct {
			Object struct {
				ID string `json:"id"`
			} `json:"object"`
		} `json:"data"`
	}
	event := w.EventType
	if w.EventAction != "" {
		event += "." + w.EventAction
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return event
	}
	var parts []string
	if p.Repository.FullName != "" {
		num := firstNonEmpty(p.PullRequest.Number.String(), p.Issue.Number.String(), p.Number.String())
		switch {
		case num != "":
			parts = append(parts, p.Repository.FullName+" #"+num)
		case p.Ref != "":
			parts = append(parts, p.Repository.FullName+" "+p.Ref)
		default:
			parts = append(parts, p.Repository.FullName)
		}
	}
	if p.Event.Channel != "" {
		s := "channel " + p.Event.Channel
		if ts := firstNonEmpty(p.Event.ThreadTS, p.Event.TS); ts != "" {
			s += " thread " + ts
		}
		parts = append(parts, s)
	}
	if p.Data.Object.ID != "" {
		parts = append(parts, p.Data.Object.ID)
	}
	if len(parts) == 0 {
		return event
	}
	return fmt.Sprintf("%s: %s", event, strings.Join(parts, ", "))
}

func firstNonEmpty(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}
