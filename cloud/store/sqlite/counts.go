package sqlite

import (
	"context"
	"fmt"

	"github.com/relaykit/relay/cloud/store"
)

// DeliveryCountFold folds nothing: the one writer keeps each host's counts
// in place (migration 23's triggers on deliveries).
func (s *Store) DeliveryCountFold(context.Context, *store.DeliveryCountFoldParams) (int, error) {
	return 0, nil
}

// StatsOptimize runs PRAGMA optimize on the writer, as SQLite advises for
// a long-lived connection (periodically): it analyzes only the tables
// whose row counts changed enough since they were last analyzed, each
// within a bounded number of rows, and usually does nothing. The readers
// cannot write the statistics; they read them.
func (s *Store) StatsOptimize(ctx context.Context) error {
	if _, err := s.write.ExecContext(ctx, `PRAGMA optimize`); err != nil {
		return fmt.Errorf("stats optimize: %w", err)
	}
	return nil
}
