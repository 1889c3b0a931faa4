package summary

import (
	"bytes"
	"encoding/json"

	"github.com/relaykit/relay/shared/jsonwalk"
)

// The members githubPayload holds, object by object.
var (
	githubTop   = []string{"action", "number", "ref", "ref_type", "after", "repository", "sender", "pull_request", "issue", "check_run", "check_suite", "workflow_run"}
	githubRepo  = []string{"full_name"}
	githubUser  = []string{"login"}
	githubPR    = []string{"number", "html_url", "head"}
	githubHead  = []string{"ref", "sha"}
	githubIss   = []string{"number", "html_url"}
	githubRunM  = []string{"head_branch", "head_sha", "conclusion", "html_url", "pull_requests"}
	githubCheck = []string{"head_branch", "head_sha", "conclusion", "html_url", "pull_requests", "check_suite"}
	githubNum   = []string{"number"}
)

// decodeGitHub fills p from a GitHub payload as json.Unmarshal would — the
// same values, and false where decoding would fail on a member of the wrong
// shape (a repository that is no object) — but walks only the objects p
// reads instead of decoding the whole body, most of which (installations,
// repositories, a pull request's text) the summary never looks at. What it
// does not walk it does not validate: a body broken elsewhere still yields
// the fields it holds. A name repeated within one object is read from its
// last occurrence, where decoding would merge the two.
func decodeGitHub(body []byte, p *githubPayload) bool {
	if isNull(bytes.TrimSpace(body)) {
		return true // decoding null changes nothing
	}
	var top [12][]byte
	if !jsonwalk.Fields(body, githubTop, top[:]) {
		return false
	}
	p.Action, p.Number, p.Ref, p.RefType, p.After = raw(top[0]), raw(top[1]), raw(top[2]), raw(top[3]), raw(top[4])
	var v [6][]byte
	if _, ok := object(top[5], githubRepo, v[:1]); !ok {
		return false
	}
	p.Repository.FullName = raw(v[0])
	if _, ok := object(top[6], githubUser, v[:1]); !ok {
		return false
	}
	p.Sender.Login = raw(v[0])

	present, ok := object(top[7], githubPR, v[:3])
	if !ok {
		return false
	}
	if present {
		p.PullRequest = &githubPullRequest{Number: raw(v[0]), HTMLURL: raw(v[1])}
		var h [2][]byte
		if _, ok := object(v[2], githubHead, h[:]); !ok {
			return false
		}
		p.PullRequest.Head.Ref, p.PullRequest.Head.SHA = raw(h[0]), raw(h[1])
	}

	if present, ok = object(top[8], githubIss, v[:2]); !ok {
		return false
	}
	if present {
		p.Issue = &githubIssue{Number: raw(v[0]), HTMLURL: raw(v[1])}
	}

	if present, ok = object(top[9], githubCheck, v[:]); !ok {
		return false
	}
	if present {
		p.CheckRun = &githubCheckRun{}
		var suite [5][]byte
		if !p.CheckRun.githubRun.fill(v[:5]) {
			return false
		}
		if _, ok := object(v[5], githubRunM, suite[:]); !ok || !p.CheckRun.CheckSuite.fill(suite[:]) {
			return false
		}
	}
	for i, dst := range []**githubRun{&p.CheckSuite, &p.WorkflowRun} {
		if present, ok = object(top[10+i], githubRunM, v[:5]); !ok {
			return false
		}
		if present {
			*dst = &githubRun{}
			if !(*dst).fill(v[:5]) {
				return false
			}
		}
	}
	return true
}

// fill sets r from the values of githubRunM's members; false where
// decoding would fail.
func (r *githubRun) fill(v [][]byte) bool {
	r.HeadBranch, r.HeadSHA, r.Conclusion, r.HTMLURL = raw(v[0]), raw(v[1]), raw(v[2]), raw(v[3])
	switch prs := v[4]; {
	case prs == nil || isNull(prs):
		return true
	case prs[0] != '[':
		return false
	}
	r.PullRequests = []githubPRNumber{}
	ok := true
	walked := jsonwalk.Elements(v[4], func(e []byte) {
		var n [1][]byte
		if _, isObject := object(e, githubNum, n[:]); !isObject {
			ok = false
		}
		r.PullRequests = append(r.PullRequests, githubPRNumber{Number: raw(n[0])})
	})
	return walked && ok
}

// object reads keys of the object value v into vals. present: v is an
// object; ok: v is an object, null or absent (anything else fails a decode
// into a struct).
func object(v []byte, keys []string, vals [][]byte) (present, ok bool) {
	clear(vals)
	switch {
	case v == nil || isNull(v):
		return false, true
	case v[0] == '{':
		return true, jsonwalk.Fields(v, keys, vals)
	}
	return false, false
}

func isNull(v []byte) bool { return string(v) == "null" }

// raw is v as a json.RawMessage field holds it: nil when absent.
func raw(v []byte) json.RawMessage {
	if v == nil {
		return nil
	}
	return json.RawMessage(v)
}
