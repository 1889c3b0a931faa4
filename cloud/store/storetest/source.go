package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
)

// --- sources ---

func exerciseSources(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("SourceUpsertGetList", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		p := &store.SourceUpsertParams{
			HostID:   b.host.ID,
			Name:     "github",
			Provider: "github",
			Enabled:  true,
			Events:   []string{"pull_request", "push"},
			Secrets: []store.SealedSecret{
				{Ciphertext: "c1", Fingerprint: "f1"},
				{Ciphertext: "c2", Fingerprint: "f2"},
			},
			Options:      map[string]string{"signature_header": "X-Sig", "encoding": "base64"},
			MaxBodyBytes: 25 << 20,
			Now:          base,
		}
		src, err := s.SourceUpsert(ctx, p)
		require.NoError(t, err)
		want := &store.Source{
			HostID: b.host.ID, Name: "github", Provider: "github", Enabled: true,
			Events: p.Events, Secrets: p.Secrets, Options: p.Options, MaxBodyBytes: 25 << 20,
			CreatedAt: base, UpdatedAt: base,
		}
		require.Equal(t, want, src)
		got, err := s.SourceGet(ctx, b.host.ID, "github")
		require.NoError(t, err)
		require.Equal(t, want, got)

		// Replace: every field follows, created_at stays.
		later := base.Add(time.Hour)
		src, err = s.SourceUpsert(ctx, &store.SourceUpsertParams{
			HostID: b.host.ID, Name: "github", Provider: "generic", Enabled: false,
			Secrets: []store.SealedSecret{{Ciphertext: "c3", Fingerprint: "f3"}}, Now: later,
		})
		require.NoError(t, err)
		require.Equal(t, "generic", src.Provider)
		require.False(t, src.Enabled)
		require.Empty(t, src.Events, "no events: every event")
		require.Equal(t, []store.SealedSecret{{Ciphertext: "c3", Fingerprint: "f3"}}, src.Secrets)
		require.Empty(t, src.Options)
		require.Zero(t, src.MaxBodyBytes)
		require.Equal(t, base, src.CreatedAt)
		require.Equal(t, later, src.UpdatedAt)

		_, err = s.SourceUpsert(ctx, &store.SourceUpsertParams{HostID: b.host.ID, Name: "stripe", Provider: "stripe", Enabled: true, Now: base})
		require.NoError(t, err)
		_, err = s.SourceUpsert(ctx, &store.SourceUpsertParams{HostID: b.host.ID, Name: "billing", Provider: "standard", Enabled: true, Now: base})
		require.NoError(t, err)
		_, err = s.SourceUpsert(ctx, &store.SourceUpsertParams{HostID: b.other.ID, Name: "slack", Provider: "slack", Enabled: true, Now: base})
		require.NoError(t, err)

		list, err := s.SourceList(ctx, b.host.ID)
		require.NoError(t, err)
		var names []string
		for _, src := range list {
			names = append(names, src.Name)
		}
		require.Equal(t, []string{"billing", "github", "stripe"}, names)

		_, err = s.SourceGet(ctx, b.host.ID, "slack")
		require.ErrorIs(t, err, store.ErrNotFound, "another host's source")
		_, err = s.SourceGet(ctx, "nope", "github")
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = s.SourceUpsert(ctx, &store.SourceUpsertParams{HostID: "nope", Name: "github", Provider: "github", Now: base})
		require.ErrorIs(t, err, store.ErrNotFound, "unknown host")
		list, err = s.SourceList(ctx, "nope")
		require.NoError(t, err)
		require.Empty(t, list)
	})
}
