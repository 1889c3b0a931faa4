package secrets

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func testKey(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

func TestSealOpenRoundTrip(t *testing.T) {
	r, err := NewRing(testKey(1))
	require.NoError(t, err)
	ct, err := r.Seal([]byte("s3cret"), []byte("h1/github"))
	require.NoError(t, err)
	require.NotContains(t, ct, "s3cret")
	pt, err := r.Open(ct, []byte("h1/github"))
	require.NoError(t, err)
	require.Equal(t, "s3cret", string(pt))

	// Bound to its context: the same ciphertext under another source fails.
	_, err = r.Open(ct, []byte("h2/github"))
	require.Error(t, err)
	require.False(t, errors.Is(err, ErrNoKey))
}

func TestSealIsRandomized(t *testing.T) {
	r, _ := NewRing(testKey(1))
	a, _ := r.Seal([]byte("x"), nil)
	b, _ := r.Seal([]byte("x"), nil)
	require.NotEqual(t, a, b)
}

func TestRotation(t *testing.T) {
	old, _ := NewRing(testKey(1))
	ct, _ := old.Seal([]byte("s"), nil)

	both, _ := NewRing(testKey(2), testKey(1))
	pt, err := both.Open(ct, nil)
	require.NoError(t, err)
	require.Equal(t, "s", string(pt))
	resealed, _ := both.Seal(pt, nil)
	require.NotEqual(t, KeyID(ct), KeyID(resealed))

	onlyNew, _ := NewRing(testKey(2))
	_, err = onlyNew.Open(ct, nil)
	require.ErrorIs(t, err, ErrNoKey)
	pt, err = onlyNew.Open(resealed, nil)
	require.NoError(t, err)
	require.Equal(t, "s", string(pt))
}

func TestTamperedCiphertext(t *testing.T) {
	r, _ := NewRing(testKey(1))
	ct, _ := r.Seal([]byte("secret"), nil)
	raw, _ := base64.StdEncoding.DecodeString(ct[strings.LastIndex(ct, ":")+1:])
	raw[len(raw)-1] ^= 1
	bad := ct[:strings.LastIndex(ct, ":")+1] + base64.StdEncoding.EncodeToString(raw)
	_, err := r.Open(bad, nil)
	require.Error(t, err)
	for _, s := range []string{"", "v1", "v2:abc:AAAA", "v1:" + KeyID(ct) + ":!!", "v1:" + KeyID(ct) + ":AAAA"} {
		_, err := r.Open(s, nil)
		require.Error(t, err, s)
	}
}

func keyID(t *testing.T, k []byte) string {
	t.Helper()
	r, err := NewRing(k)
	require.NoError(t, err)
	return r.SealingKeyID()
}

// TestReplace: a ring replaced in place opens what the new keys sealed and
// seals with the new first key, for every holder of the ring.
func TestReplace(t *testing.T) {
	held, err := NewRing(testKey(1))
	require.NoError(t, err)
	newer, err := NewRing(testKey(2), testKey(1))
	require.NoError(t, err)
	sealed, err := newer.Seal([]byte("s"), []byte("ctx"))
	require.NoError(t, err)
	_, err = held.Open(sealed, []byte("ctx"))
	require.ErrorIs(t, err, ErrNoKey)

	held.Replace(newer)
	pt, err := held.Open(sealed, []byte("ctx"))
	require.NoError(t, err)
	require.Equal(t, "s", string(pt))
	require.Equal(t, keyID(t, testKey(2)), held.SealingKeyID())
	require.Equal(t, []string{keyID(t, testKey(2)), keyID(t, testKey(1))}, held.KeyIDs())
}

func TestParseRing(t *testing.T) {
	k1 := base64.StdEncoding.EncodeToString(testKey(1))
	k2 := base64.StdEncoding.EncodeToString(testKey(2))
	r, err := ParseRing(k2 + ", " + k1)
	require.NoError(t, err)
	require.Equal(t, []string{keyID(t, testKey(2)), keyID(t, testKey(1))}, r.KeyIDs())
	// A keys file: one key a line, a trailing line break, CRLF.
	r, err = ParseRing(k2 + "\n" + k1 + "\r\n")
	require.NoError(t, err)
	require.Equal(t, []string{keyID(t, testKey(2)), keyID(t, testKey(1))}, r.KeyIDs())

	_, err = ParseRing("")
	require.ErrorContains(t, err, "no keys")
	_, err = ParseRing("not base64!")
	require.ErrorContains(t, err, "not base64")
	_, err = ParseRing(base64.StdEncoding.EncodeToString([]byte("short")))
	require.ErrorContains(t, err, "want 32 bytes")
}

func TestKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data", "secret.key")
	k1, err := LoadOrCreateKeyFile(path)
	require.NoError(t, err)
	require.Len(t, k1, 32)
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	k2, err := LoadOrCreateKeyFile(path)
	require.NoError(t, err)
	require.Equal(t, k1, k2)

	require.NoError(t, os.WriteFile(path, []byte("garbage"), 0o600))
	_, err = LoadOrCreateKeyFile(path)
	require.Error(t, err)
}

// TestFingerprint: a fingerprint is keyed. Two clouds with different keys
// name the same secret differently, and no fingerprint is a hash of the
// secret anyone could compute (as the unkeyed ones stored before were).
func TestFingerprint(t *testing.T) {
	keyA, keyB := testKey(1), testKey(2)
	secret := []byte("a webhook secret")
	f := Fingerprint(keyA, secret)
	require.Len(t, f, 16)
	require.Equal(t, f, Fingerprint(keyA, secret), "the same under the same key: every replica shows the same")
	require.NotEqual(t, f, Fingerprint(keyA, []byte("another secret")))
	require.NotEqual(t, f, Fingerprint(keyB, secret), "another cloud's key names the secret differently")

	plain := sha256.Sum256(secret)
	require.NotContains(t, hex.EncodeToString(plain[:]), f, "not SHA-256 of the secret")
	old := sha256.Sum256(append([]byte("relay-secret-fingerprint\x00"), secret...))
	unkeyed := hex.EncodeToString(old[:])[:12]
	require.NotContains(t, f, unkeyed, "not the unkeyed fingerprint of before")
	require.False(t, Unkeyed(f))
	require.True(t, Unkeyed(unkeyed), "a stored fingerprint of before is told apart")
	require.False(t, Unkeyed("f1"))
	require.False(t, Unkeyed("ABCDEF012345"))
}
