package verify

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSecretHeaders(t *testing.T) {
	cases := []struct {
		provider string
		opts     map[string]string
		want     []string
	}{
		{"gitlab", nil, []string{"X-Gitlab-Token"}},
		{"telegram", nil, []string{"X-Telegram-Bot-Api-Secret-Token"}},
		{"generic", map[string]string{"mode": "token"}, []string{"X-Webhook-Secret"}},
		{"generic", map[string]string{"mode": "token", "signature_header": "X-Api-Key"}, []string{"X-Api-Key"}},
		{"generic", nil, nil},
		{"github", nil, nil},
		{"stripe", nil, nil},
	}
	for _, c := range cases {
		p, ok := Lookup(c.provider)
		require.True(t, ok)
		require.Equal(t, c.want, SecretHeaders(p, c.opts), "%s %v", c.provider, c.opts)
	}
}
