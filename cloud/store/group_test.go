package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// partialStore stores every other insert of a batch and fails the rest, as
// an engine does whose second transaction fails after its first committed.
// Alone, an insert is stored unless it is poisoned.
type partialStore struct {
	Store
	calls  [][]string // event ids of each call
	poison string
}

var errLost = errors.New("connection lost")

func (p *partialStore) DeliveryInsertBatch(_ context.Context, ps []*DeliveryInsertParams) ([]*DeliveryInsertResult, error) {
	var ids []string
	for _, q := range ps {
		ids = append(ids, q.EventID)
	}
	p.calls = append(p.calls, ids)
	res := make([]*DeliveryInsertResult, len(ps))
	if len(ps) == 1 {
		if ps[0].EventID == p.poison {
			return nil, errLost
		}
		res[0] = &DeliveryInsertResult{Delivery: &Delivery{ID: ps[0].EventID}, Outcome: InsertQueued}
		return res, nil
	}
	for i := 0; i < len(ps); i += 2 {
		res[i] = &DeliveryInsertResult{Delivery: &Delivery{ID: ps[i].EventID}, Outcome: InsertQueued}
	}
	return res, errLost
}

// A batch that failed after storing part of it: the stored inserts are
// answered as stored, and only the others are tried again, one at a time.
func TestGroupFlushAnswersWhatAPartialBatchStored(t *testing.T) {
	ctx := context.Background()
	st := &partialStore{poison: "evt-3"}
	g := &grouped{Store: st, o: GroupOptions{MaxBatch: 8, Flushers: 1, Timeout: time.Second}}
	var batch []*groupItem
	for i := range 6 {
		batch = append(batch, &groupItem{ctx: ctx, ps: []*DeliveryInsertParams{{EventID: fmt.Sprintf("evt-%d", i)}},
			done: make(chan groupResult, 1)})
	}
	g.flush(batch)

	require.Equal(t, [][]string{
		{"evt-0", "evt-1", "evt-2", "evt-3", "evt-4", "evt-5"},
		{"evt-1"}, {"evt-3"}, {"evt-5"},
	}, st.calls, "what the batch stored is not written again")
	for i, it := range batch {
		r := <-it.done
		if i == 3 {
			require.ErrorIs(t, r.err, errLost, "the poisoned insert fails alone")
			continue
		}
		require.NoError(t, r.err, "evt-%d", i)
		require.Len(t, r.res, 1)
		require.Equal(t, InsertQueued, r.res[0].Outcome)
		require.Equal(t, fmt.Sprintf("evt-%d", i), r.res[0].Delivery.ID)
	}
}

// countingStore stores every insert and counts its batches.
type countingStore struct {
	Store
	mu      sync.Mutex
	batches int
	closed  bool
}

func (c *countingStore) DeliveryInsertBatch(_ context.Context, ps []*DeliveryInsertParams) ([]*DeliveryInsertResult, error) {
	c.mu.Lock()
	c.batches++
	c.mu.Unlock()
	res := make([]*DeliveryInsertResult, len(ps))
	for i, p := range ps {
		res[i] = &DeliveryInsertResult{Delivery: &Delivery{ID: p.EventID}, Outcome: InsertQueued}
	}
	return res, nil
}

func (c *countingStore) Close() error {
	c.closed = true
	return nil
}

// Close stops every flusher (TestMain's goleak sees none left), closes the
// store beneath, and refuses inserts made after it.
func TestGroupCommitCloseStopsFlushers(t *testing.T) {
	ctx := context.Background()
	st := &countingStore{}
	g := GroupCommit(st, GroupOptions{MaxBatch: 4, Flushers: 3, Timeout: time.Second})
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := g.DeliveryInsert(ctx, &DeliveryInsertParams{EventID: fmt.Sprintf("evt-%d", i)})
			if !assert.NoError(t, err) {
				return
			}
			assert.Equal(t, fmt.Sprintf("evt-%d", i), res.Delivery.ID)
		}()
	}
	wg.Wait()
	require.NoError(t, g.Close())
	require.True(t, st.closed)
	require.NoError(t, g.Close(), "a second Close is a no-op")
	_, err := g.DeliveryInsert(ctx, &DeliveryInsertParams{EventID: "late"})
	require.ErrorIs(t, err, ErrClosed)
}
