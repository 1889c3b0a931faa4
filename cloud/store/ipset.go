package store

import (
	"context"
	"time"
)

// IPSetStore keeps the named sets of sender addresses that sources' IP
// allowlists may name (a provider's published webhook ranges), as last
// refreshed by an operator or the scheduled refresh: every replica reads
// them from here.
type IPSetStore interface {
	// IPSetGet returns one set, or ErrNotFound when it was never stored.
	IPSetGet(ctx context.Context, name string) (*IPSet, error)
	// IPSetList returns every stored set, by name.
	IPSetList(ctx context.Context) ([]*IPSet, error)
	// IPSetPut stores a set's new addresses, clears its last error, and
	// once committed tells every listener
	// (DeliveryListenParams.IPSetChanged).
	IPSetPut(ctx context.Context, p *IPSetPutParams) (*IPSet, error)
	// IPSetFailed records a refresh that failed: the set's addresses stay
	// as they are (none when it was never stored), its error and the time
	// of the attempt are kept. Listeners are not told: nothing they use
	// changed.
	IPSetFailed(ctx context.Context, p *IPSetFailedParams) (*IPSet, error)
}

// IPSet is a named set of addresses and networks, in CIDR notation.
type IPSet struct {
	Name     string
	Prefixes []string // empty: never refreshed successfully
	// Origin says where the addresses came from: the publisher's URL, or
	// "file" for an operator's refresh.
	Origin      string
	TakenAt     time.Time // when the addresses were taken from their origin
	RefreshedAt time.Time // when they were stored
	CheckedAt   time.Time // the last refresh attempt, failed or not
	LastError   string    // why the last attempt failed; "" when it did not
}

type IPSetPutParams struct {
	Name     string
	Prefixes []string
	Origin   string
	TakenAt  time.Time
	Now      time.Time
}

type IPSetFailedParams struct {
	Name   string
	Origin string // where the failed attempt read from
	Error  string // cut to IPSetMaxErrorBytes
	Now    time.Time
}

// IPSetMaxErrorBytes bounds a set's recorded error.
const IPSetMaxErrorBytes = 500

// BoundedError is the params' error as stored: cut to IPSetMaxErrorBytes,
// not inside a character.
func (p *IPSetFailedParams) BoundedError() string { return cutUTF8(p.Error, IPSetMaxErrorBytes) }
