package storetest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
)

// exerciseSources covers sources.
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

// exerciseIPSets: named sets of sender addresses, and sources' allowlists.
func exerciseIPSets(ctx context.Context, t *testing.T, setup setupFunc) {
	t.Run("IPSetPutGetList", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		_, err := s.IPSetGet(ctx, "github")
		require.ErrorIs(t, err, store.ErrNotFound)
		sets, err := s.IPSetList(ctx)
		require.NoError(t, err)
		require.Empty(t, sets)

		taken := base.Add(-time.Hour)
		got, err := s.IPSetPut(ctx, &store.IPSetPutParams{Name: "stripe", Prefixes: []string{"192.0.2.1/32", "2001:db8::/32"},
			Origin: "file", TakenAt: taken, Now: base})
		require.NoError(t, err)
		want := &store.IPSet{Name: "stripe", Prefixes: []string{"192.0.2.1/32", "2001:db8::/32"}, Origin: "file",
			TakenAt: taken, RefreshedAt: base, CheckedAt: base}
		require.Equal(t, want, got)
		got, err = s.IPSetGet(ctx, "stripe")
		require.NoError(t, err)
		require.Equal(t, want, got)

		_, err = s.IPSetPut(ctx, &store.IPSetPutParams{Name: "github", Prefixes: []string{"198.51.100.0/24"},
			Origin: "http://127.0.0.1/meta", TakenAt: base, Now: base})
		require.NoError(t, err)
		// A new refresh replaces the set whole.
		_, err = s.IPSetPut(ctx, &store.IPSetPutParams{Name: "stripe", Prefixes: []string{"203.0.113.0/24"},
			Origin: "file", TakenAt: base.Add(time.Minute), Now: base.Add(time.Minute)})
		require.NoError(t, err)
		sets, err = s.IPSetList(ctx)
		require.NoError(t, err)
		require.Len(t, sets, 2)
		require.Equal(t, "github", sets[0].Name, "by name")
		require.Equal(t, "stripe", sets[1].Name)
		require.Equal(t, []string{"203.0.113.0/24"}, sets[1].Prefixes)
		require.Equal(t, base.Add(time.Minute), sets[1].RefreshedAt)
	})

	t.Run("IPSetFailedKeepsLastGood", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		_, err := s.IPSetPut(ctx, &store.IPSetPutParams{Name: "github", Prefixes: []string{"198.51.100.0/24"},
			Origin: "http://127.0.0.1/meta", TakenAt: base, Now: base})
		require.NoError(t, err)
		got, err := s.IPSetFailed(ctx, &store.IPSetFailedParams{Name: "github", Origin: "http://127.0.0.1/other",
			Error: strings.Repeat("é", 400), Now: base.Add(time.Hour)})
		require.NoError(t, err)
		require.Equal(t, []string{"198.51.100.0/24"}, got.Prefixes, "the last good set stays")
		require.Equal(t, "http://127.0.0.1/meta", got.Origin, "the good set's origin stays")
		require.Equal(t, base, got.RefreshedAt)
		require.Equal(t, base.Add(time.Hour), got.CheckedAt)
		require.LessOrEqual(t, len(got.LastError), store.IPSetMaxErrorBytes)
		require.True(t, strings.HasPrefix(got.LastError, "éé"), "cut between characters")
		require.Equal(t, strings.Repeat("é", store.IPSetMaxErrorBytes/2), got.LastError)

		// A good refresh clears the error.
		got, err = s.IPSetPut(ctx, &store.IPSetPutParams{Name: "github", Prefixes: []string{"203.0.113.0/24"},
			Origin: "file", TakenAt: base.Add(2 * time.Hour), Now: base.Add(2 * time.Hour)})
		require.NoError(t, err)
		require.Empty(t, got.LastError)

		// A set that never refreshed records its failure with no addresses.
		got, err = s.IPSetFailed(ctx, &store.IPSetFailedParams{Name: "stripe", Origin: "http://127.0.0.1/ips",
			Error: "unreachable", Now: base})
		require.NoError(t, err)
		require.Equal(t, &store.IPSet{Name: "stripe", Origin: "http://127.0.0.1/ips", CheckedAt: base, LastError: "unreachable"}, got)
		got, err = s.IPSetGet(ctx, "stripe")
		require.NoError(t, err)
		require.Nil(t, got.Prefixes)
		require.True(t, got.RefreshedAt.IsZero())
	})

	t.Run("IPSetListenChanged", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		changed := make(chan string, 10)
		listen(ctx, t, s, &store.DeliveryListenParams{
			Available:    func(string) {},
			IPSetChanged: func(name string) { changed <- name },
		})
		_, err := s.IPSetFailed(ctx, &store.IPSetFailedParams{Name: "github", Error: "x", Now: base})
		require.NoError(t, err)
		_, err = s.IPSetPut(ctx, &store.IPSetPutParams{Name: "stripe", Prefixes: []string{"192.0.2.0/24"}, Origin: "file", TakenAt: base, Now: base})
		require.NoError(t, err)
		require.Equal(t, "stripe", receive(t, changed, "no change told"), "a failed refresh tells nothing; a stored set is told")
	})

	t.Run("IPSetSourceAllowedIPs", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		p := &store.SourceUpsertParams{HostID: b.host.ID, Name: "github", Provider: "github", Enabled: true,
			Secrets: []store.SealedSecret{{Ciphertext: "c", Fingerprint: "f"}}, AllowedIPs: []string{"203.0.113.0/24", "github"}, Now: base}
		src, err := s.SourceUpsert(ctx, p)
		require.NoError(t, err)
		require.Equal(t, []string{"203.0.113.0/24", "github"}, src.AllowedIPs)
		src, err = s.SourceGet(ctx, b.host.ID, "github")
		require.NoError(t, err)
		require.Equal(t, []string{"203.0.113.0/24", "github"}, src.AllowedIPs)
		p.AllowedIPs = nil
		src, err = s.SourceUpsert(ctx, p)
		require.NoError(t, err)
		require.Nil(t, src.AllowedIPs, "replaced: any address")
		srcs, err := s.SourceList(ctx, b.host.ID)
		require.NoError(t, err)
		require.Nil(t, srcs[0].AllowedIPs)
	})
}
