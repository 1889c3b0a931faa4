package verify

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTelegramToken(t *testing.T) {
	p, _ := Lookup("telegram")
	v, r := findVector(t, "telegram.json", "secret-token-match")
	require.NoError(t, p.Verify(r, [][]byte{[]byte("rotated-out"), []byte(v.Secret)}, nil))
	r.Header.Set("X-Telegram-Bot-Api-Secret-Token", v.Secret+" ")
	require.ErrorIs(t, p.Verify(r, [][]byte{[]byte(v.Secret)}, nil), ErrMismatch)
}

func TestTelegramEvent(t *testing.T) {
	p, _ := Lookup("telegram")
	_, r := findVector(t, "telegram.json", "secret-token-match")
	require.Equal(t, Event{ID: "10000", Type: "message"}, p.Event(r, nil))
	cb := request(nil, []byte(`{"update_id":987654321012,"callback_query":{"id":"4382","data":"yes"}}`))
	require.Equal(t, Event{ID: "987654321012", Type: "callback_query"}, p.Event(cb, nil))
	odd := request(nil, []byte(`[]`))
	require.Equal(t, Event{ID: BodyHashID(odd.Body)}, p.Event(odd, nil))
}

func TestTelegramCheckSecret(t *testing.T) {
	p, _ := Lookup("telegram")
	c := p.(SecretChecker)
	for _, v := range loadVectors(t, "telegram.json") {
		require.NoError(t, c.CheckSecret([]byte(v.Secret)))
	}
	require.NoError(t, c.CheckSecret([]byte(strings.Repeat("a", 256))))
	require.ErrorContains(t, c.CheckSecret(nil), "1 to 256")
	require.ErrorContains(t, c.CheckSecret([]byte(strings.Repeat("a", 257))), "1 to 256")
	for _, bad := range []string{"has space", "dots.too", "ünï", "new\nline"} {
		err := c.CheckSecret([]byte(bad))
		require.ErrorContains(t, err, "A-Z", bad)
		require.NotContains(t, err.Error(), bad)
	}
}
