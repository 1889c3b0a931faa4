package postgres

import (
	"context"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/flow"
)

// PruneQuery is flow.PruneQuery in Postgres, for the plan test.
func PruneQuery(status store.Status) string { return flow.PruneQuery(flowDB{}, status) }

// Dialect is the engine's flow.Dialect, for queries the tests build.
var Dialect flow.Dialect = flowDB{}

// VolumeQuery is volumeQuery, and BacklogQuery backlogQuery, for the plan
// tests.
var (
	VolumeQuery      = volumeQuery
	BacklogQuery     = backlogQuery
	BacklogPageQuery = backlogOfHosts
)

// CandidatesQuery and CandidatesPlan are the lease's, for the plan test.
const (
	CandidatesQuery = candidatesQuery
	CandidatesPlan  = candidatesPlan
)

// LockTransitionable and OfHostByKey are the lock of a transition by ids,
// for the plan test.
var LockTransitionable = lockTransitionable

const OfHostByKey = ofHostByKey

// AckStatement is an ack's statement with write times and results
// ($8-$15), for the plan test.
var AckStatement = transitionStatement(ackSet, true, 8)

// The reads of the incident plan test: a host's deliveries, deliveries
// found, one delivery, and the counts kept.
var (
	FindQuery          = findQuery
	ListQuery          = listQuery
	CountByStatusQuery = flow.CountByStatusQuery(flowDB{})
	HostCountsQuery    = func(p *store.HostPageParams) (string, []any) { return flow.HostCountsQuery(flowDB{}, hostColumns, p) }
	FailingQuery       = failingQuery
)

// The look-ups of a delivery by its id, for the key plan test.
var (
	GetQuery       = getQuery
	EventListQuery = eventListQuery
	ResultGetQuery = resultGetQuery
	LeaseStatement = leaseStatement
	EventsAfter    = eventsAfterQuery
)

// BackendPID is the server process of one of the store's connections: the
// only one, when its URL says pool_max_conns=1.
func BackendPID(ctx context.Context, s *Store) (pid int, err error) {
	err = s.pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid)
	return pid, err
}
