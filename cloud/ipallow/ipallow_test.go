package ipallow

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseEntry(t *testing.T) {
	for in, want := range map[string]string{
		"203.0.113.0/24":       "203.0.113.0/24",
		"203.0.113.7/24":       "203.0.113.0/24",
		" 198.51.100.7 ":       "198.51.100.7/32",
		"2001:db8::1":          "2001:db8::1/128",
		"2001:db8::/32":        "2001:db8::/32",
		"::ffff:192.0.2.1":     "192.0.2.1/32",
		"::ffff:192.0.2.0/120": "192.0.2.0/24",
		"stripe":               "stripe",
		"github":               "github",
	} {
		es, err := ParseList([]string{in})
		require.NoError(t, err, in)
		require.Equal(t, []string{want}, Normalize(es), in)
	}
	for _, bad := range []string{"", "example.com", "203.0.113.0/33", "300.1.1.1", "slack", "GitHub", "10.0.0.0/8/8"} {
		_, err := ParseList([]string{"192.0.2.1", bad})
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), `"`+bad+`"`, "the error names the entry")
	}
	require.Equal(t, []string{"192.0.2.0/24", "stripe"}, Normalize(must(ParseList([]string{"192.0.2.0/24", "stripe", "192.0.2.9/24"}))))
}

func TestParsePublished(t *testing.T) {
	got, err := ParsePublished([]byte(`{"verifiable_password_authentication": false, "hooks": ["192.30.252.0/22", "2001:db8::/32"], "web": ["1.2.3.4/32"]}`), "hooks")
	require.NoError(t, err)
	require.Equal(t, []string{"192.30.252.0/22", "2001:db8::/32"}, Strings(got))

	got, err = ParsePublished([]byte("# webhook senders\n3.18.12.63\n\n 54.187.216.72 # us-west\n"), "")
	require.NoError(t, err)
	require.Equal(t, []string{"3.18.12.63/32", "54.187.216.72/32"}, Strings(got))

	got, err = ParsePublished([]byte(`["198.51.100.0/24"]`), "hooks")
	require.NoError(t, err)
	require.Equal(t, []string{"198.51.100.0/24"}, Strings(got))

	for name, in := range map[string]string{
		"empty":          "",
		"comments only":  "# nothing\n",
		"empty field":    `{"hooks": []}`,
		"missing field":  `{"web": ["1.2.3.4/32"]}`,
		"html":           "<html>rate limited</html>",
		"bad entry":      "192.0.2.1\nnot-an-ip\n",
		"truncated json": `{"hooks": ["192.0.2.0/24"`,
	} {
		_, err := ParsePublished([]byte(in), "hooks")
		require.Error(t, err, name)
	}
	_, err = ParsePublished(nil, "")
	require.ErrorIs(t, err, ErrEmpty)
}

func TestListAllows(t *testing.T) {
	addr := netip.MustParseAddr
	var any *List
	require.True(t, any.Allows(addr("203.0.113.7")))
	require.True(t, (&List{}).Allows(addr("203.0.113.7")), "not restricted")
	none := &List{Restricted: true}
	require.False(t, none.Allows(addr("203.0.113.7")), "restricted to sets that hold nothing yet")
	l := &List{Restricted: true, Prefixes: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("2001:db8::/32")}}
	require.True(t, l.Allows(addr("203.0.113.7")))
	require.True(t, l.Allows(addr("::ffff:203.0.113.7")), "IPv4-mapped")
	require.True(t, l.Allows(addr("2001:db8::5")))
	require.False(t, l.Allows(addr("198.51.100.7")))
	require.False(t, l.Allows(addr("127.0.0.1")))
}

func TestShippedSetsParse(t *testing.T) {
	for _, p := range Publishers {
		for _, s := range p.Shipped {
			_, err := ParsePrefix(s)
			require.NoError(t, err, "%s: %s", p.Name, s)
		}
		if len(p.Shipped) > 0 {
			require.False(t, p.ShippedAt.IsZero(), p.Name)
			require.NotEmpty(t, p.ShippedFrom, p.Name)
		}
		require.NotEmpty(t, p.URL, p.Name)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
