package verify

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestVercel(t *testing.T) {
	p, _ := Lookup("vercel")
	v, r := findVector(t, "vercel.json", "deployment-succeeded-valid")
	require.Equal(t, Event{ID: "evt_3f2a1b0c", Type: "deployment.succeeded"}, p.Event(r, nil))
	sig := r.Header.Get("x-vercel-signature")
	r.Header.Set("x-vercel-signature", "sha1="+sig)
	require.ErrorIs(t, p.Verify(r, [][]byte{[]byte(v.Secret)}, nil), ErrMalformed, "no prefix")
	r.Header.Set("x-vercel-signature", sig+"00")
	require.ErrorIs(t, p.Verify(r, [][]byte{[]byte(v.Secret)}, nil), ErrMalformed)
}
