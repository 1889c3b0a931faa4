package sqlite

import (
	"context"
	"fmt"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/flow"
)

// IPSetPut stores the set, then tells this process's listeners of it. The
// rest of store.IPSetStore is flow.IPSets, which Store embeds.
func (s *Store) IPSetPut(ctx context.Context, p *store.IPSetPutParams) (*store.IPSet, error) {
	set, err := flow.PutIPSet(ctx, s.db(), executor{s.write}, p)
	if err != nil {
		return nil, fmt.Errorf("ip set put: %w", interpretError(err))
	}
	s.ipsets.notify(p.Name)
	return set, nil
}
