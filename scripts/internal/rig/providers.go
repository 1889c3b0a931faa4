package rig

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Signed webhooks of providers besides GitHub (github.go), as each signs
// them, for load that mixes providers.

// StripeWebhook returns a Stripe event body with id and its headers, signed
// with secret at now (Stripe-Signature: t=…,v1=HMAC-SHA256 of "t.body").
func StripeWebhook(secret, id string, now time.Time) ([]byte, http.Header) {
	body := fmt.Appendf(nil, `{"id":%q,"object":"event","type":"invoice.paid","created":%d,"livemode":false,"data":{"object":{"id":"in_%s","object":"invoice","amount_paid":2000,"currency":"usd"}}}`,
		id, now.Unix(), id)
	ts := strconv.FormatInt(now.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "."))
	m.Write(body)
	return body, http.Header{
		"Content-Type":     {"application/json; charset=utf-8"},
		"User-Agent":       {"Stripe/1.0 (+https://stripe.com/docs/webhooks)"},
		"Stripe-Signature": {"t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))},
	}
}

// SlackWebhook returns a Slack Events API callback with event_id id and its
// headers, signed with secret at now (X-Slack-Signature: v0= HMAC-SHA256 of
// "v0:timestamp:body").
func SlackWebhook(secret, id string, now time.Time) ([]byte, http.Header) {
	body := fmt.Appendf(nil, `{"token":"x","team_id":"T0001","api_app_id":"A0001","type":"event_callback","event_id":%q,"event_time":%d,"event":{"type":"message","channel":"C0001","user":"U0001","text":"hello","ts":"%d.000100"}}`,
		id, now.Unix(), now.Unix())
	ts := strconv.FormatInt(now.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("v0:" + ts + ":"))
	m.Write(body)
	return body, http.Header{
		"Content-Type":              {"application/json"},
		"User-Agent":                {"Slackbot 1.0 (+https://api.slack.com/robots)"},
		"X-Slack-Request-Timestamp": {ts},
		"X-Slack-Signature":         {"v0=" + hex.EncodeToString(m.Sum(nil))},
	}
}
