package store

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// ErrClosed: the store was closed while a call waited.
var ErrClosed = errors.New("store closed")

// GroupOptions tunes GroupCommit.
type GroupOptions struct {
	// MaxBatch bounds the inserts of one transaction (0: 256).
	MaxBatch int
	// Flushers is how many transactions may be open at once (0: 1). One suits
	// SQLite's single writer; a few let Postgres gather the next batch while
	// one commits.
	Flushers int
	// Timeout bounds one batch's transaction (0: 30 s).
	Timeout time.Duration
	// Observe, when set, is told each batch's size and how long its
	// transaction took.
	Observe func(size int, took time.Duration)
}

// GroupCommit returns st with DeliveryInsert gathered into shared
// transactions (group commit): inserts that arrive while a transaction is
// being written wait for the next one, which takes them all, up to
// MaxBatch. Each call returns only once the transaction holding its insert
// committed, so a webhook is still answered only after it is durable — the
// commit's cost is shared instead of paid per request. There is no added
// delay: an insert that finds a flusher idle is written at once.
//
// When a batch fails, the inserts it did not store are retried one at a
// time, so one bad insert fails alone. Close stops the flushers, then closes st.
func GroupCommit(st Store, o GroupOptions) Store {
	if o.MaxBatch <= 0 {
		o.MaxBatch = 256
	}
	if o.Flushers <= 0 {
		o.Flushers = 1
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	g := &grouped{Store: st, o: o, queue: make(chan *groupItem, o.MaxBatch*o.Flushers), stop: make(chan struct{}),
		stopped: make(chan struct{})}
	g.wg.Add(o.Flushers)
	for range o.Flushers {
		go g.flusher()
	}
	return g
}

type grouped struct {
	Store
	o        GroupOptions
	queue    chan *groupItem
	stop     chan struct{} // closed by Close: the flushers stop
	stopped  chan struct{} // closed once every flusher has returned
	stopOnce sync.Once
	wg       sync.WaitGroup
	closeErr error
}

// BodyPacker is an engine that stores bodies in a form of its own
// (compressed): the group commit has each caller pack its inserts' bodies
// (PackedBody) before they are queued, so that the work is spread over the
// callers instead of lengthening the shared transaction.
type BodyPacker interface {
	PackBodies(ps []*DeliveryInsertParams)
}

// groupItem is one caller's inserts: one webhook's delivery, or a
// fanout's deliveries (one per member), which go in one transaction.
type groupItem struct {
	ctx  context.Context
	ps   []*DeliveryInsertParams
	done chan groupResult // buffered: the flusher never waits on a caller
}

type groupResult struct {
	res []*DeliveryInsertResult
	err error
}

func (g *grouped) DeliveryInsert(ctx context.Context, p *DeliveryInsertParams) (*DeliveryInsertResult, error) {
	res, err := g.DeliveryInsertBatch(ctx, []*DeliveryInsertParams{p})
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// DeliveryInsertBatch stores ps together, in one of the shared
// transactions: all of them or none (a fanout's deliveries).
func (g *grouped) DeliveryInsertBatch(ctx context.Context, ps []*DeliveryInsertParams) ([]*DeliveryInsertResult, error) {
	if p, ok := g.Store.(BodyPacker); ok {
		p.PackBodies(ps)
	}
	it := &groupItem{ctx: ctx, ps: ps, done: make(chan groupResult, 1)}
	select {
	case g.queue <- it:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-g.stop:
		return nil, ErrClosed
	}
	select {
	case r := <-it.done:
		return r.res, r.err
	case <-ctx.Done():
		// The insert may still commit, as when a provider hangs up just
		// after it did: sent again, it is found as a duplicate.
		return nil, ctx.Err()
	case <-g.stopped:
		// Queued just as the flushers stopped: no one will write it.
		select {
		case r := <-it.done:
			return r.res, r.err
		default:
			return nil, ErrClosed
		}
	}
}

func (g *grouped) flusher() {
	defer g.wg.Done()
	batch := make([]*groupItem, 0, g.o.MaxBatch)
	for {
		select {
		case it := <-g.queue:
			batch = append(batch[:0], it)
		case <-g.stop:
			g.refuseQueued()
			return
		}
	gather:
		for len(batch) < g.o.MaxBatch {
			select {
			case it := <-g.queue:
				batch = append(batch, it)
			default:
				break gather
			}
		}
		g.flush(batch)
		clear(batch)
	}
}

// refuseQueued answers whatever is still queued once the store closes.
func (g *grouped) refuseQueued() {
	for {
		select {
		case it := <-g.queue:
			it.done <- groupResult{err: ErrClosed}
		default:
			return
		}
	}
}

// flush writes one batch: its callers still waiting, in one transaction.
func (g *grouped) flush(batch []*groupItem) {
	live := batch[:0:0]
	for _, it := range batch {
		if err := it.ctx.Err(); err != nil {
			it.done <- groupResult{err: err}
			continue
		}
		live = append(live, it)
	}
	if len(live) == 0 {
		return
	}
	ps := make([]*DeliveryInsertParams, 0, len(live))
	for _, it := range live {
		ps = append(ps, it.ps...)
	}
	start := time.Now()
	results, err := g.insert(ps)
	if g.o.Observe != nil {
		g.o.Observe(len(ps), time.Since(start))
	}
	if err == nil {
		for _, it := range live {
			it.done <- groupResult{res: results[:len(it.ps):len(it.ps)]}
			results = results[len(it.ps):]
		}
		return
	}
	if len(live) == 1 {
		live[0].done <- groupResult{err: err}
		return
	}
	// What was stored is answered; the rest is tried again one caller's
	// inserts at a time, so that one bad insert (or a deadlock with
	// another batch) fails no other.
	failed := live[:0:0]
	for _, it := range live {
		mine := results[:min(len(it.ps), len(results))]
		results = results[len(mine):]
		if len(mine) == len(it.ps) && !slices.Contains(mine, nil) {
			it.done <- groupResult{res: mine}
			continue
		}
		failed = append(failed, it)
	}
	for _, it := range failed {
		res, err := g.insert(it.ps)
		it.done <- groupResult{res: res, err: err}
	}
}

func (g *grouped) insert(ps []*DeliveryInsertParams) ([]*DeliveryInsertResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), g.o.Timeout)
	defer cancel()
	return g.Store.DeliveryInsertBatch(ctx, ps)
}

// Close stops the flushers (inserts still queued are refused with
// ErrClosed) and closes the store.
func (g *grouped) Close() error {
	g.stopOnce.Do(func() {
		close(g.stop)
		g.wg.Wait()
		close(g.stopped)
		g.closeErr = g.Store.Close()
	})
	return g.closeErr
}
