package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestACMEDomains(t *testing.T) {
	got, err := acmeDomains(" Relay.Example.com ,www.example.com,")
	require.NoError(t, err)
	require.Equal(t, []string{"relay.example.com", "www.example.com"}, got)
	for _, bad := range []string{"localhost", "::1", "127.0.0.1", "*.example.com", "-a.example.com", "a..example.com", "a_b.example.com", ","} {
		_, err := acmeDomains(bad)
		require.Error(t, err, bad)
	}
}
