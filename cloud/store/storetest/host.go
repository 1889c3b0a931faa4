package storetest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
)

// exerciseHosts covers hosts.
func exerciseHosts(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("HostCreateGet", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		now := base.Add(123456789 * time.Nanosecond) // sub-millisecond digits are dropped
		h := createHost(ctx, t, s, "host-c", now)
		require.Equal(t, &store.Host{
			ID:              "host-c",
			Name:            "name of host-c",
			Status:          store.HostActive,
			Generation:      1,
			ClaimCodeHash:   hashOf("code-host-c"),
			ClaimExpiresAt:  ptr(base.Add(24*time.Hour + 123*time.Millisecond)),
			RateLimitPerMin: 100,
			RateLimitBurst:  20,
			CreatedAt:       base.Add(123 * time.Millisecond),
		}, h)

		got, err := s.HostGet(ctx, "host-c")
		require.NoError(t, err)
		require.Equal(t, h, got)

		got, err = s.HostGet(ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, b.host, got)

		_, err = s.HostGet(ctx, "nope")
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("HostCreateConflict", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		_, err := s.HostCreate(ctx, &store.HostCreateParams{ID: b.host.ID, Name: "again", ClaimCodeHash: hashOf("x"), ClaimExpiresAt: base.Add(time.Hour), Now: base})
		require.ErrorIs(t, err, store.ErrConflict)
	})

	t.Run("HostList", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		createHost(ctx, t, s, "host-z", base.Add(time.Second))
		createHost(ctx, t, s, "host-y", base.Add(2*time.Second))
		hosts, err := s.HostList(ctx)
		require.NoError(t, err)
		var got []string
		for _, h := range hosts {
			got = append(got, h.ID)
		}
		require.Equal(t, []string{b.host.ID, b.other.ID, "host-z", "host-y"}, got, "oldest first")
	})

	t.Run("HostClaim", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		now := base.Add(time.Hour)
		h, err := s.HostClaim(ctx, &store.HostClaimParams{
			ClaimCodeHash: hashOf("code-host-a"), CredentialHash: hashOf("cred"), AgentVersion: "1.2.3", Now: now,
		})
		require.NoError(t, err)
		require.Equal(t, b.host.ID, h.ID)
		require.Equal(t, hashOf("cred"), h.CredentialHash)
		require.Nil(t, h.ClaimCodeHash, "the code is consumed")
		require.Nil(t, h.ClaimExpiresAt)
		require.Equal(t, ptr(now), h.ClaimedAt)
		require.Equal(t, "1.2.3", h.AgentVersion)
		require.Equal(t, b.host.Generation+1, h.Generation, "claiming revokes earlier tokens")

		got, err := s.HostGet(ctx, h.ID)
		require.NoError(t, err)
		require.Equal(t, h, got)

		// Used: the same code again.
		_, err = s.HostClaim(ctx, &store.HostClaimParams{ClaimCodeHash: hashOf("code-host-a"), CredentialHash: hashOf("cred2"), Now: now})
		require.ErrorIs(t, err, store.ErrNotFound)
		// Unknown code.
		_, err = s.HostClaim(ctx, &store.HostClaimParams{ClaimCodeHash: hashOf("never"), CredentialHash: hashOf("cred2"), Now: now})
		require.ErrorIs(t, err, store.ErrNotFound)
		// The other host's code is untouched by all this.
		got, err = s.HostGet(ctx, b.other.ID)
		require.NoError(t, err)
		require.Equal(t, b.other, got)
	})

	t.Run("HostClaimExpired", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		for _, now := range []time.Time{*b.host.ClaimExpiresAt, b.host.ClaimExpiresAt.Add(time.Hour)} {
			_, err := s.HostClaim(ctx, &store.HostClaimParams{ClaimCodeHash: hashOf("code-host-a"), CredentialHash: hashOf("cred"), Now: now})
			require.ErrorIs(t, err, store.ErrNotFound, "claim at %s", now)
		}
		// Just before expiry it still works.
		_, err := s.HostClaim(ctx, &store.HostClaimParams{ClaimCodeHash: hashOf("code-host-a"), CredentialHash: hashOf("cred"),
			Now: b.host.ClaimExpiresAt.Add(-time.Millisecond)})
		require.NoError(t, err)
	})

	t.Run("HostClaimDeactivated", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		_, err := s.HostDeactivate(ctx, &store.HostDeactivateParams{HostID: b.host.ID, Now: base})
		require.NoError(t, err)
		_, err = s.HostClaim(ctx, &store.HostClaimParams{ClaimCodeHash: hashOf("code-host-a"), CredentialHash: hashOf("cred"), Now: base})
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("HostSetClaimCode", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		h, err := s.HostSetClaimCode(ctx, &store.HostSetClaimCodeParams{HostID: b.host.ID, ClaimCodeHash: hashOf("new"), ClaimExpiresAt: base.Add(time.Hour)})
		require.NoError(t, err)
		require.Equal(t, hashOf("new"), h.ClaimCodeHash)
		require.Equal(t, ptr(base.Add(time.Hour)), h.ClaimExpiresAt)
		require.Equal(t, b.host.Generation, h.Generation)

		// The old code is gone, the new one works, once.
		_, err = s.HostClaim(ctx, &store.HostClaimParams{ClaimCodeHash: hashOf("code-host-a"), CredentialHash: hashOf("c1"), Now: base})
		require.ErrorIs(t, err, store.ErrNotFound)
		claimed, err := s.HostClaim(ctx, &store.HostClaimParams{ClaimCodeHash: hashOf("new"), CredentialHash: hashOf("c1"), Now: base})
		require.NoError(t, err)
		require.Equal(t, b.host.Generation+1, claimed.Generation)

		// A claimed host can be re-keyed with a fresh code.
		_, err = s.HostSetClaimCode(ctx, &store.HostSetClaimCodeParams{HostID: b.host.ID, ClaimCodeHash: hashOf("again"), ClaimExpiresAt: base.Add(time.Hour)})
		require.NoError(t, err)
		reclaimed, err := s.HostClaim(ctx, &store.HostClaimParams{ClaimCodeHash: hashOf("again"), CredentialHash: hashOf("c2"), Now: base.Add(time.Minute)})
		require.NoError(t, err)
		require.Equal(t, hashOf("c2"), reclaimed.CredentialHash)
		require.Equal(t, claimed.Generation+1, reclaimed.Generation)

		_, err = s.HostSetClaimCode(ctx, &store.HostSetClaimCodeParams{HostID: "nope", ClaimCodeHash: hashOf("x"), ClaimExpiresAt: base.Add(time.Hour)})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = s.HostDeactivate(ctx, &store.HostDeactivateParams{HostID: b.other.ID, Now: base})
		require.NoError(t, err)
		_, err = s.HostSetClaimCode(ctx, &store.HostSetClaimCodeParams{HostID: b.other.ID, ClaimCodeHash: hashOf("x"), ClaimExpiresAt: base.Add(time.Hour)})
		require.ErrorIs(t, err, store.ErrNotFound, "deactivated host")
	})

	t.Run("HostHeartbeat", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		sub := json.RawMessage(`{"webhooks":{"github":{"enabled":true,"events":["push"]}}}`)
		require.NoError(t, s.HostHeartbeat(ctx, &store.HostHeartbeatParams{HostID: b.host.ID, AgentVersion: "1.0.0", Subscription: sub, Now: base.Add(time.Minute)}))
		h, err := s.HostGet(ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, ptr(base.Add(time.Minute)), h.LastHeartbeatAt)
		require.Equal(t, "1.0.0", h.AgentVersion)
		require.JSONEq(t, string(sub), string(h.Subscription))

		// A nil subscription leaves the stored one alone.
		require.NoError(t, s.HostHeartbeat(ctx, &store.HostHeartbeatParams{HostID: b.host.ID, AgentVersion: "1.0.1", Now: base.Add(2 * time.Minute)}))
		h, err = s.HostGet(ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, ptr(base.Add(2*time.Minute)), h.LastHeartbeatAt)
		require.Equal(t, "1.0.1", h.AgentVersion)
		require.JSONEq(t, string(sub), string(h.Subscription))

		// A new one replaces it.
		sub2 := json.RawMessage(`{"webhooks":{}}`)
		require.NoError(t, s.HostHeartbeat(ctx, &store.HostHeartbeatParams{HostID: b.host.ID, AgentVersion: "1.0.1", Subscription: sub2, Now: base.Add(3 * time.Minute)}))
		h, err = s.HostGet(ctx, b.host.ID)
		require.NoError(t, err)
		require.JSONEq(t, string(sub2), string(h.Subscription))

		other, err := s.HostGet(ctx, b.other.ID)
		require.NoError(t, err)
		require.Nil(t, other.LastHeartbeatAt)
		require.Nil(t, other.Subscription)

		err = s.HostHeartbeat(ctx, &store.HostHeartbeatParams{HostID: "nope", Now: base})
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("HostDeactivate", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		now := base.Add(time.Hour)
		h, err := s.HostDeactivate(ctx, &store.HostDeactivateParams{HostID: b.host.ID, Now: now})
		require.NoError(t, err)
		require.Equal(t, store.HostDeactivated, h.Status)
		require.Equal(t, ptr(now), h.DeactivatedAt)
		require.Equal(t, b.host.Generation+1, h.Generation, "deactivating revokes tokens")
		require.Nil(t, h.ClaimCodeHash)

		got, err := s.HostGet(ctx, b.host.ID)
		require.NoError(t, err)
		require.Equal(t, h, got)

		other, err := s.HostGet(ctx, b.other.ID)
		require.NoError(t, err)
		require.Equal(t, store.HostActive, other.Status)

		_, err = s.HostDeactivate(ctx, &store.HostDeactivateParams{HostID: "nope", Now: now})
		require.ErrorIs(t, err, store.ErrNotFound)
	})
}
