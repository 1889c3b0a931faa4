// Package delivery is the cloud's delivery core: the retry policy and the
// decision of every failed attempt, and the use case of a host fetching its
// deliveries — apply its report, lease its next batch, wait for work, mark
// what was handed out — over a narrow store (Store) and for any transport:
// the heartbeat's long poll calls Heartbeat and RecordWrite; a connection
// that pushes deliveries calls Report, NextPush (over its Outbox) and
// ConnectionLost, and the intake leases to it as it stores
// (Connections.Reserve).
//
// The store runs what the core decides: a failed attempt's Failure is built
// here (Fail, through the params constructors NackParams, ReleaseParams, …)
// and applied by the engine with one update guarded on the transition's
// From.
//
// The Service's methods are grouped by use case, one file each:
// service.go (the service, the heartbeat and what a host says of itself),
// report.go (applying a host's report), lease.go (leasing, waiting for
// work and handing out, for a poll or a pushing connection) and
// wakeups.go (who waits for work, and the store's listener that wakes
// them).
package delivery
