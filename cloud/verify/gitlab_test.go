package verify

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGitLabToken(t *testing.T) {
	p, v, r, secret := verifiedVector(t, "gitlab", "token-match")
	for _, bad := range []string{v.Secret + " ", " " + v.Secret, "GLWT-3B1F9C0E8D7A6B5C4D3E2F1A", v.Secret[:len(v.Secret)-1]} {
		r.Header.Set("X-Gitlab-Token", bad)
		require.ErrorIs(t, p.Verify(r, secret, nil), ErrMismatch, "%q: verbatim, case-sensitive, no trimming", bad)
	}
}

// With webhook-signature present the signing token decides; a right classic
// token does not rescue a wrong signature.
func TestGitLabSigningTokenDecides(t *testing.T) {
	p, _ := Lookup("gitlab")
	v, r := findVector(t, "gitlab.json", "signing-token-standard-webhooks")
	secrets := [][]byte{[]byte("plain-token"), []byte(v.Secret)}
	require.NoError(t, p.Verify(r, secrets, nil), "a classic token among the secrets does not matter")

	r.Header.Set("X-Gitlab-Token", "plain-token")
	r.Header.Set("webhook-signature", "v1,NZ3UMJHMUBxRo1Txr9AGni32EW9wvmti/6zbz8a9Tus=")
	require.ErrorIs(t, p.Verify(r, secrets, nil), ErrMismatch)

	_, r = findVector(t, "gitlab.json", "signing-token-standard-webhooks")
	r.Now = r.Now.Add(10 * 60e9)
	require.ErrorIs(t, p.Verify(r, [][]byte{[]byte(v.Secret)}, nil), ErrStale)
}

func TestGitLabEvent(t *testing.T) {
	p, _ := Lookup("gitlab")
	_, r := findVector(t, "gitlab.json", "token-match")
	require.Equal(t, Event{ID: "a1f3c6e2-7b8d-4e9f-9a0b-1c2d3e4f5a6b", Type: "push"}, p.Event(r, nil))
	r.Header.Del("Idempotency-Key")
	require.Equal(t, "6b5a2f5e-43c0-4e4f-8a4e-2a3ddc8f7e11", p.Event(r, nil).ID, "older GitLab: the event UUID")
	r.Header.Del("X-Gitlab-Event-UUID")
	require.Equal(t, BodyHashID(r.Body), p.Event(r, nil).ID)

	mr := request(map[string]string{"X-Gitlab-Event": "Merge Request Hook"},
		[]byte(`{"object_kind":"merge_request","event_type":"merge_request","object_attributes":{"iid":1,"action":"merge"}}`))
	require.Equal(t, Event{ID: BodyHashID(mr.Body), Type: "merge_request", Action: "merge"}, p.Event(mr, nil))
	system := request(map[string]string{"X-Gitlab-Event": "System Hook"}, []byte(`{"event_name":"project_create"}`))
	require.Equal(t, "project_create", p.Event(system, nil).Type)
	opaque := request(map[string]string{"X-Gitlab-Event": "Push Hook"}, []byte(`not json`))
	require.Equal(t, "Push Hook", p.Event(opaque, nil).Type)
}

func TestGitLabCheckSecret(t *testing.T) {
	p, _ := Lookup("gitlab")
	c := p.(SecretChecker)
	for _, v := range loadVectors(t, "gitlab.json") {
		require.NoError(t, c.CheckSecret([]byte(v.Secret)), v.Name)
	}
	require.ErrorContains(t, c.CheckSecret([]byte("whsec_%%%")), "base64")
}

// A hook that sends webhook-signature to a source holding only classic
// tokens is checked on its X-Gitlab-Token.
func TestGitLabSignatureWithoutSigningToken(t *testing.T) {
	p, _ := Lookup("gitlab")
	_, r := findVector(t, "gitlab.json", "signing-token-standard-webhooks")
	r.Header.Set("X-Gitlab-Token", "classic")
	require.NoError(t, p.Verify(r, [][]byte{[]byte("classic")}, nil))
	require.ErrorIs(t, p.Verify(r, [][]byte{[]byte("other")}, nil), ErrMismatch)
	r.Header.Del("X-Gitlab-Token")
	require.ErrorIs(t, p.Verify(r, [][]byte{[]byte("classic")}, nil), ErrMissingSignature)
}
