package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/auth"
	"github.com/relaykit/relay/cloud/intake"
	"github.com/relaykit/relay/cloud/secrets"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

// unkeyedFingerprint is a fingerprint as the cloud stored it before
// fingerprints were keyed: anyone can compute it from a guessed secret.
func unkeyedFingerprint(secret string) string {
	sum := sha256.Sum256([]byte("relay-secret-fingerprint\x00" + secret))
	return hex.EncodeToString(sum[:])[:12]
}

func (b *bundle) sourceFingerprints(hostID, name string) []string {
	b.t.Helper()
	a := b.admin("GET", "/api/hosts/"+hostID+"/sources/"+name, nil)
	require.Equal(b.t, 200, a.status, string(a.body))
	var src shared.Source
	a.json(b.t, &src)
	return src.SecretFingerprints
}

// TestSourceFingerprintKeyed: the API shows a secret's fingerprint keyed
// by the cloud: not a hash of the secret that anyone could compute, the
// same on every replica (the same JWT key), and another for a cloud with
// another key.
func TestSourceFingerprintKeyed(t *testing.T) {
	b := setup(t)
	hostID, _ := b.newHost("one")
	fps := b.sourceFingerprints(hostID, "github")
	require.Len(t, fps, 1)
	fp := fps[0]
	plain := sha256.Sum256([]byte(testSecret))
	require.NotContains(t, hex.EncodeToString(plain[:]), fp, "not SHA-256 of the secret")
	require.NotEqual(t, unkeyedFingerprint(testSecret), fp, "not the unkeyed fingerprint")
	require.False(t, secrets.Unkeyed(fp))

	// A replica: the same JWT key, another server over the same database.
	replica := New(b.store, b.server.ring, b.server.tokens, b.clock, b.server.log, b.server.cfg)
	b2 := &bundle{t: t, store: b.store, clock: b.clock, server: replica}
	b2.srv = b2.serve(replica.Handler())
	t.Cleanup(b2.srv.Close)
	require.Equal(t, fps, b2.sourceFingerprints(hostID, "github"))

	// Another cloud, with another JWT key, given the same secret.
	other := setup(t)
	tokens, err := auth.NewTokens(bytes.Repeat([]byte("k"), 32), 0, other.clock)
	require.NoError(t, err)
	other.server.tokens = tokens // before any request
	otherHost, _ := other.newHost("one")
	otherFPs := other.sourceFingerprints(otherHost, "github")
	require.Len(t, otherFPs, 1)
	require.NotEqual(t, fp, otherFPs[0], "another key, another fingerprint for the same secret")
}

// TestSourceFingerprintStoredUnkeyed: a secret stored with an unkeyed
// fingerprint (before fingerprints were keyed) is shown with its keyed one,
// the fingerprint the same secret gets when set again; one no configured
// key opens is shown as that, naming the key. The unkeyed fingerprint is
// never shown.
func TestSourceFingerprintStoredUnkeyed(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	hostID, _ := b.newHost("one")
	keyed := b.sourceFingerprints(hostID, "github")[0]

	lost, err := secrets.NewRing(bytes.Repeat([]byte{9}, 32))
	require.NoError(t, err)
	const other = "a secret sealed with a lost key"
	src, err := b.store.SourceGet(ctx, hostID, "github")
	require.NoError(t, err)
	opens, err := b.server.ring.Seal([]byte(testSecret), intake.SealContext(hostID, "github"))
	require.NoError(t, err)
	lostSealed, err := lost.Seal([]byte(other), intake.SealContext(hostID, "github"))
	require.NoError(t, err)
	require.NoError(t, b.store.SourceSetSecrets(ctx, &store.SourceSetSecretsParams{HostID: hostID, Name: "github",
		Secrets: []store.SealedSecret{
			{Ciphertext: opens, Fingerprint: unkeyedFingerprint(testSecret)},
			{Ciphertext: lostSealed, Fingerprint: unkeyedFingerprint(other)},
		}, UpdatedAt: src.UpdatedAt, Now: b.clock.Now()}))

	a := b.admin("GET", "/api/hosts/"+hostID+"/sources", nil)
	require.Equal(t, 200, a.status)
	for _, unkeyed := range []string{unkeyedFingerprint(testSecret), unkeyedFingerprint(other)} {
		require.NotContains(t, string(a.body), unkeyed)
	}
	require.Equal(t, []string{keyed, "unreadable (key " + lost.SealingKeyID() + ")"}, b.sourceFingerprints(hostID, "github"))

	// cloud rekey names a secret it cannot open by its place, not by its
	// unkeyed fingerprint.
	res, err := intake.Rekey(ctx, b.store, b.server.ring, b.clock.Now())
	require.NoError(t, err)
	require.Len(t, res.Failed, 1)
	require.Contains(t, res.Failed[0], "secret #2")
	require.NotContains(t, res.Failed[0], unkeyedFingerprint(other))
}
