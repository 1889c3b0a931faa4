package auth

import (
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

func newTokens(t *testing.T) (*Tokens, *clockwork.FakeClock) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 2, 16, 10, 0, 0, 0, time.UTC))
	tk, err := NewTokens(testKey, 0, clock)
	require.NoError(t, err)
	return tk, clock
}

func TestIssueVerify(t *testing.T) {
	tk, clock := newTokens(t)
	s, exp, err := tk.Issue("h_1", 3)
	require.NoError(t, err)
	require.Equal(t, clock.Now().Add(15*time.Minute), exp)
	c, err := tk.Verify(s)
	require.NoError(t, err)
	require.Equal(t, "h_1", c.Subject)
	require.Equal(t, int64(3), c.Generation)
}

func TestExpired(t *testing.T) {
	tk, clock := newTokens(t)
	s, _, _ := tk.Issue("h_1", 1)
	clock.Advance(16 * time.Minute)
	_, err := tk.Verify(s)
	require.ErrorIs(t, err, ErrInvalidToken)
}

func TestRejects(t *testing.T) {
	tk, clock := newTokens(t)
	now := clock.Now()
	good := Claims{Generation: 1, RegisteredClaims: jwt.RegisteredClaims{
		Issuer: issuer, Subject: "h_1", Audience: jwt.ClaimStrings{shared.TokenAudience},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Minute)),
	}}
	sign := func(m jwt.SigningMethod, c Claims, key any) string {
		s, err := jwt.NewWithClaims(m, c).SignedString(key)
		require.NoError(t, err)
		return s
	}
	valid := sign(jwt.SigningMethodHS256, good, testKey)
	_, err := tk.Verify(valid)
	require.NoError(t, err)

	cases := map[string]string{
		"empty":         "",
		"garbage":       "not.a.jwt",
		"other key":     sign(jwt.SigningMethodHS256, good, []byte("another key, also thirty-two bytes!")),
		"HS512":         sign(jwt.SigningMethodHS512, good, testKey),
		"alg none":      sign(jwt.SigningMethodNone, good, jwt.UnsafeAllowNoneSignatureType),
		"tampered":      valid[:len(valid)-2] + flip(valid[len(valid)-2:]),
		"wrong payload": swapPayload(valid, sign(jwt.SigningMethodHS256, withSubject(good, "h_2"), []byte("x"))),
	}
	noExp := good
	noExp.ExpiresAt = nil
	cases["no exp"] = sign(jwt.SigningMethodHS256, noExp, testKey)
	wrongAud := good
	wrongAud.Audience = jwt.ClaimStrings{"admin"}
	cases["wrong audience"] = sign(jwt.SigningMethodHS256, wrongAud, testKey)
	wrongIss := good
	wrongIss.Issuer = "someone"
	cases["wrong issuer"] = sign(jwt.SigningMethodHS256, wrongIss, testKey)
	future := good
	future.IssuedAt = jwt.NewNumericDate(now.Add(time.Hour))
	cases["issued in the future"] = sign(jwt.SigningMethodHS256, future, testKey)
	noSub := good
	noSub.Subject = ""
	cases["no subject"] = sign(jwt.SigningMethodHS256, noSub, testKey)

	for name, tok := range cases {
		_, err := tk.Verify(tok)
		require.ErrorIs(t, err, ErrInvalidToken, name)
	}
}

func withSubject(c Claims, sub string) Claims { c.Subject = sub; return c }

// swapPayload puts b's payload under a's header and signature.
func swapPayload(a, b string) string {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	return pa[0] + "." + pb[1] + "." + pa[2]
}

func flip(s string) string {
	if s[0] == 'A' {
		return "B" + s[1:]
	}
	return "A" + s[1:]
}

func TestShortKeyRefused(t *testing.T) {
	_, err := NewTokens([]byte("short"), 0, clockwork.NewRealClock())
	require.Error(t, err)
}

func TestCodesAndHashes(t *testing.T) {
	c := NewClaimCode()
	require.Len(t, c, 19)
	require.Equal(t, c, NormalizeClaimCode(strings.ToLower(strings.ReplaceAll(c, "-", ""))))
	require.NotEqual(t, c, NewClaimCode())
	require.True(t, strings.HasPrefix(NewCredential(), "hc_"))
	require.True(t, strings.HasPrefix(NewHostID(), "h_"))
	for range 100 {
		require.True(t, ValidHostID(NewHostID()))
	}
	require.True(t, ValidHostID("h_0123456789abcdefghjkmnpq"))
	for _, id := range []string{"", "h_", "h_nosuchhost",
		"h_0123456789abcdefghjkmnp",   // short
		"h_0123456789abcdefghjkmnpqr", // long
		"H_0123456789abcdefghjkmnpq", "x_0123456789abcdefghjkmnpq",
		"h_0123456789ABCDEFGHJKMNPQ", // NewHostID writes lower case
		"h_0123456789abcdefghjkmnpu", "h_0123456789abcdefghjkmnpi", "h_0123456789abcdefghjkmnp/",
		"h_0123456789abcdefghjkmnp\x00", "h_0123456789abcdefghjkmné",
	} {
		require.False(t, ValidHostID(id), id)
	}
	require.True(t, HashEqual(Hash("a"), Hash("a")))
	require.False(t, HashEqual(Hash("a"), Hash("b")))
	require.False(t, HashEqual(nil, Hash("b")))
	require.True(t, BearerEqual("tok", "tok"))
	require.False(t, BearerEqual("tok", ""))
	require.False(t, BearerEqual("", ""))
	require.False(t, BearerEqual("tok2", "tok"))
}

// TestGroupIDs: a group id has a host id's shape with its own prefix; the
// one is never taken for the other.
func TestGroupIDs(t *testing.T) {
	require.True(t, strings.HasPrefix(NewGroupID(), "g_"))
	require.NotEqual(t, NewGroupID(), NewGroupID())
	for range 100 {
		id := NewGroupID()
		require.True(t, ValidGroupID(id), id)
		require.False(t, ValidHostID(id), id)
		require.False(t, ValidGroupID(NewHostID()))
	}
	require.True(t, ValidGroupID("g_0123456789abcdefghjkmnpq"))
	for _, id := range []string{"", "g_", "g_nosuchgroup",
		"g_0123456789abcdefghjkmnp",   // short
		"g_0123456789abcdefghjkmnpqr", // long
		"G_0123456789abcdefghjkmnpq", "h_0123456789abcdefghjkmnpq",
		"g_0123456789ABCDEFGHJKMNPQ", // NewGroupID writes lower case
		"g_0123456789abcdefghjkmnpu", "g_0123456789abcdefghjkmnp/", "g_0123456789abcdefghjkmné",
	} {
		require.False(t, ValidGroupID(id), id)
	}
}

// A derived key is fixed by the signing key and the purpose, and is neither
// the signing key nor another purpose's key.
func TestDerivedKey(t *testing.T) {
	clock := clockwork.NewFakeClock()
	a, err := NewTokens([]byte("0123456789abcdef0123456789abcdef"), 0, clock)
	require.NoError(t, err)
	again, err := NewTokens([]byte("0123456789abcdef0123456789abcdef"), 0, clock)
	require.NoError(t, err)
	other, err := NewTokens([]byte("fedcba9876543210fedcba9876543210"), 0, clock)
	require.NoError(t, err)

	k := a.DerivedKey("quarantine")
	require.Len(t, k, 32)
	require.Equal(t, k, again.DerivedKey("quarantine"), "the same on every replica")
	require.NotEqual(t, k, a.DerivedKey("other"))
	require.NotEqual(t, k, other.DerivedKey("quarantine"))
	require.NotContains(t, string(k), "0123456789abcdef")
}
