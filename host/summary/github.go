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
// repositories, a pull request's text) the summary never looks at, and
// walks them in one pass: the objects it reads within the payload are read
// where the payload's walk meets them, not walked again once it is done
// (which had each byte of a pull request's head scanned three times). What
// it does not walk it does not validate: a body broken elsewhere still
// yields the fields it holds. A name repeated within one object is read
// from its last occurrence, where decoding would merge the two.
func decodeGitHub(body []byte, p *githubPayload) bool {
	if isNull(bytes.TrimSpace(body)) {
		return true // decoding null changes nothing
	}
	var (
		top                         [12][]byte
		repo, user                  [1][]byte
		pr                          [3][]byte
		head                        [2][]byte
		issue                       [2][]byte
		check                       [6][]byte
		checkSuite, suite, workflow [5][]byte
	)
	// Each object read is cleared when its member is met: of a repeated
	// member, the last occurrence's fields count, as its value does.
	nested := func(k int, b []byte, i int) int {
		switch k {
		case 5:
			return within(b, i, githubRepo, repo[:], nil)
		case 6:
			return within(b, i, githubUser, user[:], nil)
		case 7:
			clear(head[:])
			return within(b, i, githubPR, pr[:], func(k int, b []byte, i int) int {
				if k == 2 {
					return within(b, i, githubHead, head[:], nil)
				}
				return jsonwalk.End(b, i)
			})
		case 8:
			return within(b, i, githubIss, issue[:], nil)
		case 9:
			clear(checkSuite[:])
			return within(b, i, githubCheck, check[:], func(k int, b []byte, i int) int {
				if k == 5 {
					return within(b, i, githubRunM, checkSuite[:], nil)
				}
				return jsonwalk.End(b, i)
			})
		case 10:
			return within(b, i, githubRunM, suite[:], nil)
		case 11:
			return within(b, i, githubRunM, workflow[:], nil)
		}
		return jsonwalk.End(b, i)
	}
	if end := jsonwalk.FieldsAt(body, skipSpace(body), githubTop, top[:], nested); end < 0 || len(bytes.TrimSpace(body[end:])) > 0 {
		return false
	}
	p.Action, p.Number, p.Ref, p.RefType, p.After = raw(top[0]), raw(top[1]), raw(top[2]), raw(top[3]), raw(top[4])
	if _, ok := object(top[5]); !ok {
		return false
	}
	p.Repository.FullName = raw(repo[0])
	if _, ok := object(top[6]); !ok {
		return false
	}
	p.Sender.Login = raw(user[0])

	present, ok := object(top[7])
	if !ok {
		return false
	}
	if present {
		p.PullRequest = &githubPullRequest{Number: raw(pr[0]), HTMLURL: raw(pr[1])}
		if _, ok := object(pr[2]); !ok {
			return false
		}
		p.PullRequest.Head.Ref, p.PullRequest.Head.SHA = raw(head[0]), raw(head[1])
	}

	if present, ok = object(top[8]); !ok {
		return false
	}
	if present {
		p.Issue = &githubIssue{Number: raw(issue[0]), HTMLURL: raw(issue[1])}
	}

	if present, ok = object(top[9]); !ok {
		return false
	}
	if present {
		p.CheckRun = &githubCheckRun{}
		if !p.CheckRun.githubRun.fill(check[:5]) {
			return false
		}
		if _, ok := object(check[5]); !ok || !p.CheckRun.CheckSuite.fill(checkSuite[:]) {
			return false
		}
	}
	for i, run := range []struct {
		dst  **githubRun
		vals [][]byte
	}{{&p.CheckSuite, suite[:]}, {&p.WorkflowRun, workflow[:]}} {
		if present, ok = object(top[10+i]); !ok {
			return false
		}
		if present {
			*run.dst = &githubRun{}
			if !(*run.dst).fill(run.vals) {
				return false
			}
		}
	}
	return true
}

// within reads keys of the value at b[i] into vals (cleared first) when it
// is an object, and returns the index just past the value.
func within(b []byte, i int, keys []string, vals [][]byte, nested jsonwalk.Nested) int {
	clear(vals)
	if i < len(b) && b[i] == '{' {
		return jsonwalk.FieldsAt(b, i, keys, vals, nested)
	}
	return jsonwalk.End(b, i)
}

func skipSpace(b []byte) int {
	return len(b) - len(bytes.TrimLeft(b, " \t\n\r"))
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
		if _, isObject := objectFields(e, githubNum, n[:]); !isObject {
			ok = false
		}
		r.PullRequests = append(r.PullRequests, githubPRNumber{Number: raw(n[0])})
	})
	return walked && ok
}

// object says whether the value v, read by a walk, is an object (present)
// and whether it is one, null or absent (ok): anything else fails a decode
// into a struct.
func object(v []byte) (present, ok bool) {
	switch {
	case v == nil || isNull(v):
		return false, true
	case v[0] == '{':
		return true, true
	}
	return false, false
}

// objectFields reads keys of the object value v into vals, as object
// classifies it.
func objectFields(v []byte, keys []string, vals [][]byte) (present, ok bool) {
	clear(vals)
	if present, ok = object(v); present {
		ok = jsonwalk.Fields(v, keys, vals)
	}
	return present, ok
}

func isNull(v []byte) bool { return string(v) == "null" }

// raw is v as a json.RawMessage field holds it: nil when absent.
func raw(v []byte) json.RawMessage {
	if v == nil {
		return nil
	}
	return json.RawMessage(v)
}
