// Package summary reads the payloads of well-known providers (GitHub, Stripe,
// Slack) for the few fields that say what a webhook is about and where an
// answer belongs: a repository and PR number, a Stripe object, a Slack
// channel and thread. The host writes them into its ledger and hands them to
// exec handlers as RELAY_<PROVIDER>_<FIELD> environment variables.
package summary

import (
	"bytes"
	"encoding/json"
	"net/url"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/relaykit/relay/shared"
)

// Parsers a source may name in its configuration.
const (
	GitHub = "github"
	Stripe = "stripe"
	Slack  = "slack"
	None   = "none" // no parsing: the summary is the event type
)

// Known reports whether name is a parser a source may ask for.
func Known(name string) bool {
	switch name {
	case GitHub, Stripe, Slack, None:
		return true
	}
	return false
}

// Summary is what the host read from one webhook.
type Summary struct {
	// Provider is the parser that read the payload ("" when none applied).
	Provider string
	// Text is one line for people: "pull_request.opened Codertocat/Hello-World #2 (changes) by Codertocat".
	Text string
	// Fields are keyed "provider.field" ("github.repo", "slack.thread_ts");
	// empty values are left out.
	Fields map[string]string
}

// maxValue bounds one field's value: these are identifiers, not content.
const maxValue = 512

// Of reads w. hint names the parser ("github", "stripe", "slack", "none");
// empty means: pick one from the provider's headers, else from the source's
// name. A payload the parser cannot read yields the event type alone.
func Of(w shared.Webhook, hint string) Summary {
	provider := hint
	if provider == "" {
		provider = detect(w)
	}
	s := Summary{Fields: map[string]string{}}
	body := []byte(w.Body)
	if len(body) == 0 {
		body = w.RawBody
	}
	var parts []string
	switch provider {
	case GitHub:
		parts = s.github(w, body)
	case Stripe:
		parts = s.stripe(body)
	case Slack:
		parts = s.slack(w, body)
	}
	for k, v := range s.Fields {
		if v = clean(v); v == "" {
			delete(s.Fields, k)
		} else {
			s.Fields[k] = v
		}
	}
	if len(s.Fields) > 0 {
		s.Provider = provider
	}
	event := w.EventType
	if w.EventAction != "" {
		event += "." + w.EventAction
	}
	s.Text = strings.TrimSpace(strings.Join(append([]string{event}, parts...), " "))
	return s
}

// detect names the parser for w from the headers its provider always sends,
// else from the source's name.
func detect(w shared.Webhook) string {
	has := func(name string) bool {
		for k := range w.Headers {
			if strings.EqualFold(k, name) {
				return true
			}
		}
		return false
	}
	switch {
	case has("X-GitHub-Event"):
		return GitHub
	case has("Stripe-Signature"):
		return Stripe
	case has("X-Slack-Signature"), has("X-Slack-Request-Timestamp"):
		return Slack
	}
	switch strings.ToLower(w.Source) {
	case GitHub, Stripe, Slack:
		return strings.ToLower(w.Source)
	}
	return ""
}

// Env returns the fields as environment variables, sorted:
// "slack.thread_ts" becomes RELAY_SLACK_THREAD_TS=….
func (s Summary) Env() []string {
	keys := make([]string, 0, len(s.Fields))
	for k := range s.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	env := make([]string, 0, len(keys))
	for _, k := range keys {
		env = append(env, EnvName(k)+"="+s.Fields[k])
	}
	return env
}

// EnvName is the environment variable of a field key.
func EnvName(key string) string {
	return "RELAY_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(key))
}

// EnvPrefixes are the prefixes of every variable Env can produce, so a
// handler's environment can drop inherited ones that a webhook did not set.
var EnvPrefixes = []string{"RELAY_GITHUB_", "RELAY_STRIPE_", "RELAY_SLACK_"}

// clean makes v safe for an environment variable: no NUL, bounded length,
// never cut inside a UTF-8 sequence.
func clean(v string) string {
	v = strings.TrimSpace(strings.ReplaceAll(v, "\x00", ""))
	v = strings.ToValidUTF8(v, "")
	if len(v) <= maxValue {
		return v
	}
	cut := maxValue
	for cut > 0 && v[cut]&0xC0 == 0x80 {
		cut--
	}
	return v[:cut]
}

// str decodes a JSON string or number; anything else is "".
func str(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	// raw comes from a decoded payload, so it is one valid JSON value: a
	// string without escapes is its own bytes, a number its own text.
	switch c := raw[0]; {
	case c == '"' && len(raw) >= 2:
		if body := raw[1 : len(raw)-1]; bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body) {
			return string(body)
		}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	case c == '-' || (c >= '0' && c <= '9'):
		return string(raw)
	}
	return ""
}

func first(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// githubPayload holds the fields read from any GitHub event.
type githubPayload struct {
	Action     json.RawMessage `json:"action"`
	Number     json.RawMessage `json:"number"`
	Ref        json.RawMessage `json:"ref"`
	RefType    json.RawMessage `json:"ref_type"`
	After      json.RawMessage `json:"after"`
	Repository struct {
		FullName json.RawMessage `json:"full_name"`
	} `json:"repository"`
	Sender struct {
		Login json.RawMessage `json:"login"`
	} `json:"sender"`
	PullRequest *githubPullRequest `json:"pull_request"`
	Issue       *githubIssue       `json:"issue"`
	CheckRun    *githubCheckRun    `json:"check_run"`
	CheckSuite  *githubRun         `json:"check_suite"`
	WorkflowRun *githubRun         `json:"workflow_run"`
}

type githubPullRequest struct {
	Number  json.RawMessage `json:"number"`
	HTMLURL json.RawMessage `json:"html_url"`
	Head    struct {
		Ref json.RawMessage `json:"ref"`
		SHA json.RawMessage `json:"sha"`
	} `json:"head"`
}

type githubIssue struct {
	Number  json.RawMessage `json:"number"`
	HTMLURL json.RawMessage `json:"html_url"`
}

type githubCheckRun struct {
	githubRun
	CheckSuite githubRun `json:"check_suite"`
}

// githubRun is the shape check runs, check suites and workflow runs share.
type githubRun struct {
	HeadBranch   json.RawMessage  `json:"head_branch"`
	HeadSHA      json.RawMessage  `json:"head_sha"`
	Conclusion   json.RawMessage  `json:"conclusion"`
	HTMLURL      json.RawMessage  `json:"html_url"`
	PullRequests []githubPRNumber `json:"pull_requests"`
}

type githubPRNumber struct {
	Number json.RawMessage `json:"number"`
}

func (r *githubRun) firstPR() string {
	if r == nil || len(r.PullRequests) == 0 {
		return ""
	}
	return str(r.PullRequests[0].Number)
}

func (s *Summary) github(w shared.Webhook, body []byte) []string {
	var p githubPayload
	if !decodeGitHub(body, &p) {
		return nil
	}
	var number, branch, sha, conclusion, link string
	if pr := p.PullRequest; pr != nil {
		number, branch, sha, link = str(pr.Number), str(pr.Head.Ref), str(pr.Head.SHA), str(pr.HTMLURL)
	}
	if is := p.Issue; is != nil {
		number, link = first(number, str(is.Number)), first(link, str(is.HTMLURL))
	}
	for _, run := range []*githubRun{p.CheckSuite, p.WorkflowRun} {
		if run != nil {
			number, branch, sha = first(number, run.firstPR()), first(branch, str(run.HeadBranch)), first(sha, str(run.HeadSHA))
			conclusion, link = first(conclusion, str(run.Conclusion)), first(link, str(run.HTMLURL))
		}
	}
	if cr := p.CheckRun; cr != nil {
		number = first(number, cr.firstPR(), cr.CheckSuite.firstPR())
		branch = first(branch, str(cr.HeadBranch), str(cr.CheckSuite.HeadBranch))
		sha = first(sha, str(cr.HeadSHA), str(cr.CheckSuite.HeadSHA))
		conclusion, link = first(conclusion, str(cr.Conclusion)), first(link, str(cr.HTMLURL))
	}
	number = first(number, str(p.Number))
	// push carries refs/heads/…; create and delete carry a bare ref and its type.
	if ref := str(p.Ref); branch == "" && ref != "" {
		if b, ok := strings.CutPrefix(ref, "refs/heads/"); ok {
			branch = b
		} else if str(p.RefType) == "branch" {
			branch = ref
		}
	}
	if after := str(p.After); sha == "" && strings.Trim(after, "0") != "" {
		sha = after // a deleted branch's "after" is all zeros
	}
	repo, sender := str(p.Repository.FullName), str(p.Sender.Login)
	s.Fields["github.repo"] = repo
	s.Fields["github.number"] = number
	s.Fields["github.branch"] = branch
	s.Fields["github.sha"] = sha
	s.Fields["github.action"] = first(str(p.Action), w.EventAction)
	s.Fields["github.sender"] = sender
	s.Fields["github.conclusion"] = conclusion
	s.Fields["github.url"] = link

	var parts []string
	if repo != "" {
		parts = append(parts, repo)
	}
	if number != "" {
		parts = append(parts, "#"+number)
	}
	if branch != "" {
		parts = append(parts, "("+branch+")")
	}
	if conclusion != "" {
		parts = append(parts, conclusion)
	}
	if sender != "" {
		parts = append(parts, "by "+sender)
	}
	return parts
}

func (s *Summary) stripe(body []byte) []string {
	var p stripePayload
	if !decodeStripe(body, &p) {
		return nil
	}
	objectID := str(p.Data.Object.ID)
	s.Fields["stripe.event_id"] = str(p.ID)
	s.Fields["stripe.type"] = str(p.Type)
	s.Fields["stripe.object_id"] = objectID
	s.Fields["stripe.object"] = str(p.Data.Object.Object)
	s.Fields["stripe.customer"] = str(p.Data.Object.Customer) // a string id, unless expanded
	if objectID == "" {
		return nil
	}
	return []string{objectID}
}

// slackMessage is the part of a Slack message event the host reads; a
// message_changed event carries the edited message in Message.
type slackMessage struct {
	Type     json.RawMessage `json:"type"`
	Channel  json.RawMessage `json:"channel"`
	User     json.RawMessage `json:"user"`
	TS       json.RawMessage `json:"ts"`
	ThreadTS json.RawMessage `json:"thread_ts"`
	Team     json.RawMessage `json:"team"`
	Item     *struct {
		Channel json.RawMessage `json:"channel"`
		TS      json.RawMessage `json:"ts"`
	} `json:"item"`
	Message *struct {
		User     json.RawMessage `json:"user"`
		TS       json.RawMessage `json:"ts"`
		ThreadTS json.RawMessage `json:"thread_ts"`
	} `json:"message"`
}

func (s *Summary) slack(w shared.Webhook, body []byte) []string {
	var team, channel, user, ts, threadTS, eventType string
	if form, ok := slackForm(body); ok {
		// Slash commands and interactivity arrive form-encoded.
		if raw := form.Get("payload"); raw != "" {
			var p struct {
				Type json.RawMessage `json:"type"`
				Team struct {
					ID json.RawMessage `json:"id"`
				} `json:"team"`
				Channel struct {
					ID json.RawMessage `json:"id"`
				} `json:"channel"`
				User struct {
					ID json.RawMessage `json:"id"`
				} `json:"user"`
				Message struct {
					TS       json.RawMessage `json:"ts"`
					ThreadTS json.RawMessage `json:"thread_ts"`
				} `json:"message"`
				Container struct {
					MessageTS json.RawMessage `json:"message_ts"`
				} `json:"container"`
			}
			if json.Unmarshal([]byte(raw), &p) != nil {
				return nil
			}
			eventType = str(p.Type)
			team, channel, user = str(p.Team.ID), str(p.Channel.ID), str(p.User.ID)
			ts = first(str(p.Message.TS), str(p.Container.MessageTS))
			threadTS = first(str(p.Message.ThreadTS), ts)
		} else {
			eventType = "slash_command"
			team, channel, user = form.Get("team_id"), form.Get("channel_id"), form.Get("user_id")
		}
	} else {
		var p struct {
			TeamID json.RawMessage `json:"team_id"`
			Event  slackMessage    `json:"event"`
		}
		if json.Unmarshal(body, &p) != nil {
			return nil
		}
		e := p.Event
		eventType = str(e.Type)
		team = first(str(p.TeamID), str(e.Team))
		channel, user, ts, threadTS = str(e.Channel), str(e.User), str(e.TS), str(e.ThreadTS)
		switch {
		case e.Message != nil && str(e.Message.TS) != "":
			// message_changed: the message in question is the edited one.
			user, ts, threadTS = first(str(e.Message.User), user), str(e.Message.TS), str(e.Message.ThreadTS)
		case e.Item != nil:
			// reaction_added and friends point at the message reacted to; whether
			// that message is itself a reply is not said, so no thread is implied.
			channel, ts = first(channel, str(e.Item.Channel)), str(e.Item.TS)
		}
		if e.Item == nil && ts != "" && threadTS == "" {
			// A message that is not in a thread starts one: answers go under it.
			threadTS = ts
		}
	}
	s.Fields["slack.team"] = team
	s.Fields["slack.channel"] = channel
	s.Fields["slack.user"] = user
	s.Fields["slack.ts"] = ts
	s.Fields["slack.thread_ts"] = threadTS
	s.Fields["slack.event_type"] = eventType

	var parts []string
	if eventType != "" && eventType != w.EventType {
		parts = append(parts, eventType)
	}
	if channel != "" {
		parts = append(parts, "in "+channel)
	}
	if threadTS != "" {
		parts = append(parts, "thread "+threadTS)
	}
	if user != "" {
		parts = append(parts, "by "+user)
	}
	return parts
}

// slackForm parses a form-encoded Slack body (slash commands, interactivity).
func slackForm(body []byte) (url.Values, bool) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] == '{' {
		return nil, false
	}
	form, err := url.ParseQuery(string(trimmed))
	if err != nil || len(form) == 0 {
		return nil, false
	}
	return form, true
}
