package sqlite

import (
	"context"
	"fmt"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/flow"
)

// SourceUpsert stores the source, then tells this process's listeners
// the host changed. The sources' reads are flow.Sources, which Store
// embeds.
func (s *Store) SourceUpsert(ctx context.Context, p *store.SourceUpsertParams) (*store.Source, error) {
	src, err := flow.UpsertSource(ctx, s.db(), executor{s.write}, p)
	if err != nil {
		return nil, fmt.Errorf("source upsert: %w", interpretError(err))
	}
	s.changed.notify(p.HostID)
	return src, nil
}
