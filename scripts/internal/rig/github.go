package rig

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"net/http"

	"github.com/relaykit/relay/shared/sharedtest"
)

// installationCreated is a real GitHub webhook body (3,329 bytes); see
// testdata/SOURCES.md.
//
//go:embed testdata/installation.created.json
var installationCreated []byte

// GitHubPayload returns a real GitHub webhook body and its event type
// ("installation", action "created"). The slice is shared: do not modify it.
func GitHubPayload() (event string, body []byte) {
	return "installation", installationCreated
}

// GitHubSignature is the X-Hub-Signature-256 value of body under secret.
func GitHubSignature(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// GitHubHeaders are the headers GitHub sends with a webhook, signed with
// signature (from GitHubSignature).
func GitHubHeaders(event, delivery, signature string) http.Header {
	return http.Header{
		"Content-Type":                           {"application/json"},
		"User-Agent":                             {"GitHub-Hookshot/a1b2c3d"},
		"X-Github-Event":                         {event},
		"X-Github-Delivery":                      {delivery},
		"X-Github-Hook-Id":                       {"292430182"},
		"X-Github-Hook-Installation-Target-Type": {"repository"},
		"X-Github-Hook-Installation-Target-Id":   {"79929171"},
		"X-Hub-Signature-256":                    {signature},
	}
}

// GitHubWebhook is a signed GitHub delivery as GitHub would send it.
type GitHubWebhook struct {
	Event    string      // X-GitHub-Event
	Delivery string      // X-GitHub-Delivery, the cloud's dedupe key
	Body     []byte      // the signed bytes
	Header   http.Header // GitHub's headers, signature included
}

// SignGitHub signs body with secret as GitHub does.
func SignGitHub(secret, event, delivery string, body []byte) GitHubWebhook {
	return GitHubWebhook{Event: event, Delivery: delivery, Body: body,
		Header: GitHubHeaders(event, delivery, GitHubSignature(secret, body))}
}

// WebhookURL is the intake URL of a host's source.
func WebhookURL(cloudURL, hostID, source string) string {
	return cloudURL + "/api/webhooks/" + hostID + "/" + source
}

// NewRequest builds the intake POST of the webhook to a host's source.
func (w GitHubWebhook) NewRequest(ctx context.Context, cloudURL, hostID, source string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", WebhookURL(cloudURL, hostID, source), bytes.NewReader(w.Body))
	if err != nil {
		return nil, err
	}
	req.Header = w.Header.Clone()
	req.ContentLength = int64(len(w.Body))
	return req, nil
}

// NewDeliveryID returns a random UUID (version 4), the shape of GitHub's
// X-GitHub-Delivery.
func NewDeliveryID() string {
	return sharedtest.DeliveryUUID()
}
