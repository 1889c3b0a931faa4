package verify

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func discordRequest(body string) *Request {
	return signers["discord"].request(0, []byte(body), testNow)
}

func TestDiscordSecrets(t *testing.T) {
	p, _ := Lookup("discord")
	v, r := findVector(t, "discord.json", "ping-valid")
	// Secrets that are no public key never match, and never panic.
	for _, bad := range []string{"", "zz", v.Secret[:62], v.Secret + "00", strings.Repeat("g", 64)} {
		require.ErrorIs(t, p.Verify(r, [][]byte{[]byte(bad)}, nil), ErrMismatch, bad)
	}
	require.NoError(t, p.Verify(r, [][]byte{[]byte("zz"), []byte(strings.ToUpper(v.Secret))}, nil), "hex in either case")

	c := p.(SecretChecker)
	require.NoError(t, c.CheckSecret([]byte(v.Secret)))
	for _, bad := range []string{"", v.Secret[:63], v.Secret + "0", "x" + v.Secret[1:], "ed25519:" + v.Secret} {
		err := c.CheckSecret([]byte(bad))
		require.ErrorContains(t, err, "64 hex characters", bad)
		requireNoLeak(t, err, bad)
	}
}

func TestDiscordTimestamp(t *testing.T) {
	p, _ := Lookup("discord")
	v, r := findVector(t, "discord.json", "ping-valid")
	r.Header.Set("X-Signature-Timestamp", "1700000001")
	require.ErrorIs(t, p.Verify(r, [][]byte{[]byte(v.Secret)}, nil), ErrMismatch, "the timestamp is signed")
}

func TestDiscordEvent(t *testing.T) {
	p, _ := Lookup("discord")
	_, r := findVector(t, "discord.json", "ping-valid")
	require.Equal(t, Event{ID: "787053080478613555", Type: "ping"}, p.Event(r, nil))
	cases := map[string]Event{
		`{"id":"1","type":2,"data":{"name":"deploy"}}`:                 {ID: "1", Type: "application_command", Action: "deploy"},
		`{"id":"2","type":3,"data":{"custom_id":"approve:42"}}`:        {ID: "2", Type: "message_component", Action: "approve:42"},
		`{"id":"3","type":4,"data":{"name":"deploy"}}`:                 {ID: "3", Type: "application_command_autocomplete", Action: "deploy"},
		`{"id":"4","type":5,"data":{"custom_id":"modal"}}`:             {ID: "4", Type: "modal_submit", Action: "modal"},
		`{"id":"5","type":9}`:                                          {ID: "5", Type: "9"},
		`{"version":1,"application_id":"1","type":0}`:                  {Type: "ping"},
		`{"version":1,"type":1,"event":{"type":"ENTITLEMENT_CREATE"}}`: {Type: "ENTITLEMENT_CREATE"},
	}
	for body, want := range cases {
		if want.ID == "" {
			want.ID = BodyHashID([]byte(body))
		}
		require.Equal(t, want, p.Event(discordRequest(body), nil), body)
	}
}

func TestDiscordHandshake(t *testing.T) {
	p, _ := Lookup("discord")
	h := p.(Handshaker)
	_, r := findVector(t, "discord.json", "ping-valid")
	reply, ok := h.Handshake(r)
	require.True(t, ok)
	require.Equal(t, &Reply{Status: 200, ContentType: "application/json", Body: []byte(`{"type":1}`)}, reply)

	reply, ok = h.Handshake(discordRequest(`{"version":1,"application_id":"1","type":0}`))
	require.True(t, ok, "webhook events PING")
	require.Equal(t, &Reply{Status: 204}, reply)

	for _, body := range []string{`{"id":"1","type":2}`, `{"version":1,"type":1,"event":{"type":"APPLICATION_AUTHORIZED"}}`, `nope`} {
		_, ok := h.Handshake(discordRequest(body))
		require.False(t, ok, body)
	}
}

func TestDiscordAck(t *testing.T) {
	p, _ := Lookup("discord")
	a := p.(Acknowledger)
	cases := map[string]string{
		`{"id":"1","type":2}`: `{"type":5}`,
		`{"id":"1","type":3}`: `{"type":6}`,
		`{"id":"1","type":4}`: `{"type":8,"data":{"choices":[]}}`,
		`{"id":"1","type":5}`: `{"type":5}`,
	}
	for body, want := range cases {
		reply, ok := a.Ack(discordRequest(body))
		require.True(t, ok)
		require.Equal(t, 200, reply.Status)
		require.Equal(t, "application/json", reply.ContentType)
		require.JSONEq(t, want, string(reply.Body), body)
	}
	reply, ok := a.Ack(discordRequest(`{"version":1,"type":1,"event":{"type":"APPLICATION_AUTHORIZED"}}`))
	require.True(t, ok)
	require.Equal(t, &Reply{Status: 204}, reply)
}
