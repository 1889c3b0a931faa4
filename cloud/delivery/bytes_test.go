package delivery

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
)

// What the intake reserves on a connection or a waiting poll is bounded as
// a lease's batch is: by bytes too, one larger body going alone.

func body(n int) *store.Delivery { return &store.Delivery{RawBody: make([]byte, n)} }

func TestOutboxHoldsBatchBytes(t *testing.T) {
	o := (&Service{cfg: Config{MaxBatchBytes: 10}}).NewOutbox()
	o.limit, o.caughtUp = 100, true

	v6 := o.reserve(6)
	require.NotNil(t, v6)
	require.Nil(t, o.reserve(5), "6 + 5 bytes: over the batch's 10")
	v4 := o.reserve(4)
	require.NotNil(t, v4, "6 + 4: exactly the batch")
	require.Nil(t, o.reserve(1))

	o.settle(body(6), v6.size) // handed in, not yet taken: still held
	o.settle(nil, v4.size)     // given back
	require.Nil(t, o.reserve(5), "what was handed in and not taken counts")
	v4 = o.reserve(4)
	require.NotNil(t, v4)
	o.settle(body(4), v4.size)

	require.Len(t, o.take(), 2, "the push loop takes both: one frame within the batch")
	require.Zero(t, o.held.bytes)
	big := o.reserve(25)
	require.NotNil(t, big, "nothing held: a larger body goes alone")
	require.Nil(t, o.reserve(1), "and alone")
	o.settle(nil, big.size)
	require.Zero(t, o.held.bytes)
}

func TestPollHoldsBatchBytes(t *testing.T) {
	p := newPoll(5, 10, make(chan struct{}, 1))
	p.open = true

	v6 := p.reserve(0, 6)
	require.NotNil(t, v6)
	require.Nil(t, p.reserve(0, 5), "6 + 5 bytes: over the batch's 10")
	v4 := p.reserve(0, 4)
	require.NotNil(t, v4)
	p.settle(nil, v6.size)
	p.settle(nil, v4.size)
	require.Zero(t, p.held.bytes, "given back")

	big := p.reserve(0, 25)
	require.NotNil(t, big, "nothing held: a larger body goes alone")
	require.Nil(t, p.reserve(0, 1), "and alone")
	p.settle(body(25), big.size)
	require.Len(t, p.close(), 1)
	require.Zero(t, p.held.bytes, "what it answered with holds no room")
}
