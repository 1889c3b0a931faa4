package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/flow"
)

var _ store.IPSetStore = (*Store)(nil)

// ipSetChannel is the LISTEN/NOTIFY channel on which a set's name says
// that the set was stored anew (store.DeliveryListenParams.IPSetChanged).
const ipSetChannel = "relay_ip_set_changed"

// IPSetPut stores the set and notifies every replica of it in the same
// transaction. The rest of store.IPSetStore is flow.IPSets, which Store
// embeds.
func (s *Store) IPSetPut(ctx context.Context, p *store.IPSetPutParams) (*store.IPSet, error) {
	var set *store.IPSet
	err := s.inTx(ctx, func(tx pgx.Tx) (err error) {
		if set, err = flow.PutIPSet(ctx, s.db(), executor{tx}, p); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ipSetChannel, p.Name)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("ip set put: %w", interpretError(err))
	}
	return set, nil
}
