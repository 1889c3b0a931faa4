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
package delivery
