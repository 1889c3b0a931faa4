package verify

import (
	"encoding/base64"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGeneric(t *testing.T) {
	p, ok := Lookup("generic")
	require.True(t, ok)
	require.Equal(t, 202, p.SuccessStatus())
	body := []byte(`{"type":"invoice.created","id":1}`)
	secret := []byte("k")
	hexSig := sign(secret, body)
	raw, _ := hex.DecodeString(hexSig)

	require.NoError(t, p.Verify(request(map[string]string{"X-Signature": hexSig}, body), [][]byte{secret}, nil))
	require.NoError(t, p.Verify(request(map[string]string{"X-Signature": "sha256=" + hexSig}, body), [][]byte{secret}, nil))
	require.ErrorIs(t, p.Verify(request(nil, body), [][]byte{secret}, nil), ErrMissingSignature)
	require.ErrorIs(t, p.Verify(request(map[string]string{"X-Signature": "zz"}, body), [][]byte{secret}, nil), ErrMalformed)
	require.ErrorIs(t, p.Verify(request(map[string]string{"X-Signature": hexSig}, append(body, ' ')), [][]byte{secret}, nil), ErrMismatch)

	b64 := map[string]string{"signature_header": "X-Hook-Sig", "encoding": "base64"}
	require.NoError(t, p.Verify(request(map[string]string{"X-Hook-Sig": base64.StdEncoding.EncodeToString(raw)}, body), [][]byte{secret}, b64))
	require.ErrorIs(t, p.Verify(request(map[string]string{"X-Signature": hexSig}, body), [][]byte{secret}, b64), ErrMissingSignature)
	require.ErrorIs(t, p.Verify(request(map[string]string{"X-Hook-Sig": hexSig}, body), [][]byte{secret}, b64), ErrMalformed)

	tok := map[string]string{"mode": "token"}
	require.NoError(t, p.Verify(request(map[string]string{"X-Webhook-Secret": "k"}, body), [][]byte{secret}, tok))
	require.ErrorIs(t, p.Verify(request(map[string]string{"X-Webhook-Secret": "kk"}, body), [][]byte{secret}, tok), ErrMismatch)
	require.ErrorIs(t, p.Verify(request(map[string]string{"X-Signature": hexSig}, body), [][]byte{secret}, tok), ErrMissingSignature)
}

func TestGenericEvent(t *testing.T) {
	p, _ := Lookup("generic")
	body := []byte(`{"type":"invoice.created","id":1}`)
	e := p.Event(request(map[string]string{"X-Event-Id": "e1"}, body), nil)
	require.Equal(t, Event{ID: "e1", Type: "invoice.created"}, e)
	e = p.Event(request(map[string]string{"Idempotency-Key": "k2", "X-Event-Type": "t"}, body), nil)
	require.Equal(t, Event{ID: "k2", Type: "t"}, e)
	e = p.Event(request(nil, []byte("plain")), nil)
	require.Equal(t, Event{ID: BodyHashID([]byte("plain"))}, e)
	e = p.Event(request(nil, []byte(`{"event":"build.done"}`)), nil)
	require.Equal(t, "build.done", e.Type)
	opts := map[string]string{"event_id_header": "X-Job", "event_type_header": "X-Kind"}
	e = p.Event(request(map[string]string{"X-Job": "j9", "X-Kind": "job", "X-Event-Id": "ignored"}, body), opts)
	require.Equal(t, Event{ID: "j9", Type: "job"}, e)
	e = p.Event(request(map[string]string{"X-Event-Id": "ignored"}, body), opts)
	require.Equal(t, BodyHashID(body), e.ID, "a named id header that is absent falls back to the body hash")
}
