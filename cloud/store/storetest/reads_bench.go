package storetest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
)

// BenchIncidentReads times, through s, the reads an operator runs during
// an incident, one sub-benchmark each: the host list with its counts, a
// host's counts, a look-up by correlationID (a stored delivery's), by an
// absent correlation id and an absent event id, the dead letters, and a
// host's. s holds what each engine's BenchmarkIncidentReads filled it
// with: host "h7" among its hosts.
func BenchIncidentReads(b *testing.B, s store.Store, correlationID string) {
	ctx := context.Background()
	for _, r := range []struct {
		name string
		read func() error
	}{
		{"hosts-with-counts", func() error { _, err := s.HostListWithCounts(ctx, &store.HostPageParams{Limit: 101}); return err }},
		{"host-counts", func() error { _, err := s.DeliveryCountByStatus(ctx, "h7"); return err }},
		{"correlation-id", func() error {
			_, err := s.DeliveryFind(ctx, &store.DeliveryFindParams{CorrelationID: correlationID, Limit: 21})
			return err
		}},
		{"absent-correlation-id", func() error {
			_, err := s.DeliveryFind(ctx, &store.DeliveryFindParams{CorrelationID: "0123456789abcdef", Limit: 21})
			return err
		}},
		{"absent-event-id", func() error {
			_, err := s.DeliveryFind(ctx, &store.DeliveryFindParams{EventID: "absent", Limit: 21})
			return err
		}},
		{"dead-letters", func() error {
			_, err := s.DeliveryFind(ctx, &store.DeliveryFindParams{Status: store.StatusDLQ, Limit: 51})
			return err
		}},
		{"host-dead-letters", func() error {
			_, err := s.DeliveryList(ctx, &store.DeliveryListParams{HostID: "h7", Status: store.StatusDLQ, Limit: 51})
			return err
		}},
	} {
		b.Run(r.name, func(b *testing.B) {
			for b.Loop() {
				require.NoError(b, r.read())
			}
		})
	}
}
