package agent

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/relaykit/relay/host/ledger"
	"github.com/relaykit/relay/shared"
)

// Ledger is the host's durable record as the agent uses it (a
// *ledger.Ledger): what ran and with what result, and the outbox of acks
// and nacks waiting for the cloud. Concurrent writes share a transaction.
type Ledger interface {
	// DeliveriesDone returns, of the given deliveries, those recorded as
	// done (success or skipped), with their result.
	DeliveriesDone(ctx context.Context, deliveryIDs []string) (map[string]ledger.Result, error)
	// DeliveryRecord commits an outcome with its ack or nack and returns
	// the delivery's local attempts.
	DeliveryRecord(ctx context.Context, p ledger.RecordParams) (int, error)
	// OutboxEnqueue queues an ack or nack on its own.
	OutboxEnqueue(ctx context.Context, ob ledger.OutboxEntry) error
	// OutboxList returns up to limit pending outbox entries, oldest first.
	OutboxList(ctx context.Context, limit int) ([]ledger.OutboxEntry, error)
	// OutboxDelete removes exactly the entries with the given sequence
	// numbers.
	OutboxDelete(ctx context.Context, seqs []int64) error
	// OutboxCount returns the number of pending outbox entries.
	OutboxCount(ctx context.Context) (int, error)
	// Probe commits a write that leaves nothing behind: it fails while the
	// ledger cannot record.
	Probe(ctx context.Context) error
}

// ledgerTimeout bounds one ledger step.
const ledgerTimeout = 30 * time.Second

// recorder writes what the host did to the ledger: each outcome with its
// ack or nack in one transaction, acks again of webhooks already done, and
// nacks of webhooks handed back; transports read the outbox it fills. While
// the ledger cannot record (a full disk) it says so, and the host takes no
// new work — each handler run would be lost and run again — until a probe
// write succeeds.
type recorder struct {
	ledger Ledger
	clock  clockwork.Clock
	log    *slog.Logger
	fault  func(point string)
	// observe, when set, is told of each handler run (Options.Observe).
	observe func(source, result string, took time.Duration)
	// base outlives the agent's context for ledger writes; set by Run
	// before any webhook is dispatched.
	base context.Context
	// unrecordable is set when an outcome could not be written.
	unrecordable atomic.Bool
}

// ctx bounds one ledger step, on the agent's clock and independent of
// whatever network call or handler ran before it.
func (r *recorder) ctx() (context.Context, context.CancelFunc) {
	return clockwork.WithTimeout(r.base, r.clock, ledgerTimeout)
}

// done looks a leased batch up in one query: the webhooks already done,
// with their result.
func (r *recorder) done(ids []string) (map[string]ledger.Result, error) {
	ctx, cancel := r.ctx()
	defer cancel()
	return r.ledger.DeliveriesDone(ctx, ids)
}

// record commits w's outcome with its ack or nack. Its own deadline starts
// now: the handler before it may have run for minutes.
func (r *recorder) record(w *shared.Webhook, o outcome) {
	ctx, cancel := r.ctx()
	defer cancel()
	e := &o.entry
	attempts, err := r.ledger.DeliveryRecord(ctx, ledger.RecordParams{Entry: *e, Retryable: o.retryable})
	if err != nil {
		logWebhook(r.log, slog.LevelError, "recording the outcome failed; the webhook will be delivered again", w, slog.Any("err", err))
		r.failed(err)
		return
	}
	r.recorded()
	if o.ran {
		if r.observe != nil {
			r.observe(w.Source, string(e.Result), time.Duration(e.DurationMS)*time.Millisecond)
		}
		r.fault(FaultAfterLedger)
	}
	attrs := []slog.Attr{slog.String("result", string(e.Result)), slog.String("handler", e.Handler),
		slog.Int64("duration_ms", e.DurationMS), slog.Int("local_attempts", attempts), slog.String("summary", e.Summary)}
	switch e.Result {
	case ledger.ResultError:
		logWebhook(r.log, slog.LevelWarn, "handler failed", w, append(attrs, slog.String("error", e.Error), slog.Bool("retryable", o.retryable))...)
	case ledger.ResultSkipped:
		logWebhook(r.log, slog.LevelInfo, "webhook skipped", w, append(attrs, slog.String("why", e.Output))...)
	default:
		logWebhook(r.log, slog.LevelInfo, "webhook processed", w, attrs...)
	}
}

// ackAgain queues the ack of a webhook the ledger records as done, without
// running its handler again.
func (r *recorder) ackAgain(w *shared.Webhook, prev ledger.Result) {
	ctx, cancel := r.ctx()
	defer cancel()
	ack := ledger.OutboxEntry{DeliveryID: w.DeliveryID, Kind: ledger.OutboxAck, CreatedAt: r.clock.Now()}
	if err := r.ledger.OutboxEnqueue(ctx, ack); err != nil {
		logWebhook(r.log, slog.LevelError, "queue ack again failed", w, slog.Any("err", err))
		r.failed(err)
		return
	}
	logWebhook(r.log, slog.LevelInfo, "already processed; acking again without running the handler", w, slog.String("result", string(prev)))
}

// nackNotStarted queues the nacks of webhooks handed back without running,
// saying so (not_started): the cloud hands them out again at once, and
// gives back the attempt, rather than waiting for their lease to end or
// the schedule's next delay.
func (r *recorder) nackNotStarted(ws []shared.Webhook) {
	// Enqueued concurrently, the nacks share a transaction.
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(func() {
			nack := ledger.OutboxEntry{DeliveryID: w.DeliveryID, Kind: ledger.OutboxNack, Error: "host stopping: not started",
				Retryable: true, Attempt: w.Attempt, NotStarted: true, CreatedAt: r.clock.Now()}
			ctx, cancel := r.ctx()
			err := r.ledger.OutboxEnqueue(ctx, nack)
			cancel()
			if err != nil {
				r.log.Error("nack of a webhook not started failed; it returns when its lease ends", "delivery_id", w.DeliveryID, "err", err)
			}
		})
	}
	wg.Wait()
}

// failed notes that the ledger could not record an outcome: until it can,
// the agent takes no new work.
func (r *recorder) failed(err error) {
	if !r.unrecordable.Swap(true) {
		r.log.Error("the ledger cannot record outcomes; taking no new work until it can", "err", err)
	}
}

// recorded notes that the ledger recorded an outcome.
func (r *recorder) recorded() {
	if r.unrecordable.Swap(false) {
		r.log.Info("the ledger records again; taking work")
	}
}

// paused reports whether the ledger cannot record: it probes a ledger that
// failed to, and the host takes work again once a write commits.
func (r *recorder) paused() bool {
	return r.unrecordable.Load() && !r.writable()
}

func (r *recorder) writable() bool {
	ctx, cancel := r.ctx()
	defer cancel()
	if err := r.ledger.Probe(ctx); err != nil {
		r.log.Debug("the ledger still cannot record", "err", err)
		return false
	}
	r.recorded()
	return true
}

// outbox lists up to limit acks and nacks waiting for the cloud, oldest
// first.
func (r *recorder) outbox(ctx context.Context, limit int) ([]ledger.OutboxEntry, error) {
	return r.ledger.OutboxList(ctx, limit)
}

// count returns the number of acks and nacks waiting for the cloud.
func (r *recorder) count(ctx context.Context) (int, error) {
	return r.ledger.OutboxCount(ctx)
}

// reported deletes the outbox entries the cloud has. Its own deadline: the
// cloud has them whatever the exchange's or the host stopping meanwhile.
func (r *recorder) reported(seqs []int64) error {
	ctx, cancel := r.ctx()
	defer cancel()
	return r.ledger.OutboxDelete(ctx, seqs)
}

// outboxReport is what outbox entries tell the cloud, over either
// transport: the acks, the nacks and the results of the runs, and the
// entries' seqs, to delete once the cloud has them.
type outboxReport struct {
	seqs    []int64
	acks    []string
	nacks   []shared.Nack
	results []shared.WebhookResult
}

func reportOutbox(outbox []ledger.OutboxEntry) outboxReport {
	rep := outboxReport{seqs: make([]int64, 0, len(outbox))}
	for _, ob := range outbox {
		rep.seqs = append(rep.seqs, ob.Seq)
		switch ob.Kind {
		case ledger.OutboxAck:
			rep.acks = append(rep.acks, ob.DeliveryID)
		case ledger.OutboxNack:
			rep.nacks = append(rep.nacks, shared.Nack{DeliveryID: ob.DeliveryID, Error: ob.Error, Retryable: ob.Retryable,
				Attempt: ob.Attempt, NotStarted: ob.NotStarted})
		}
		if r := ob.Ran; r != nil {
			rep.results = append(rep.results, shared.WebhookResult{DeliveryID: ob.DeliveryID, Attempt: r.Attempt,
				Result: string(r.Result), Handler: r.Handler, ResponseStatus: r.ResponseStatus, ExitCode: r.ExitCode,
				DurationMS: r.DurationMS, Error: r.Error})
		}
	}
	return rep
}

// logWebhook logs one line about w, building it only when it is logged.
func logWebhook(log *slog.Logger, level slog.Level, msg string, w *shared.Webhook, attrs ...slog.Attr) {
	if !log.Enabled(context.Background(), level) {
		return
	}
	all := make([]slog.Attr, 0, 5+len(attrs))
	all = append(all, slog.String("delivery_id", w.DeliveryID), slog.String("source", w.Source), slog.Int("attempt", w.Attempt),
		slog.String("correlation_id", w.CorrelationID))
	if id := shared.TraceIDOf(w.Headers[shared.HeaderTraceParent]); id != "" {
		all = append(all, slog.String("trace_id", id))
	}
	log.LogAttrs(context.Background(), level, msg, append(all, attrs...)...)
}
