package delivery

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A delivery stored pending before a poll waits keeps it closed until it
// looked again, however it was opened first: opened early (to take
// webhooks while its wait is set up), it must not then open on the
// pending one's account before that look.
func TestPollStaysClosedPastAPendingOneOpenedEarly(t *testing.T) {
	p := newPoll(10, 1<<20, make(chan struct{}, 1))
	p.pending()
	p.openEarly()
	require.Nil(t, p.reserve(time.Minute, 2), "opened early: not past the pending one")
	p.setOpen()
	require.Nil(t, p.reserve(time.Minute, 2), "waiting, before its look: still closed")
	p.setOpen() // after its look
	v := p.reserve(time.Minute, 2)
	require.NotNil(t, v, "open once it looked")
	v.Settle(nil, nil)

	// With nothing pending, opened early is open.
	q := newPoll(10, 1<<20, make(chan struct{}, 1))
	q.openEarly()
	v = q.reserve(time.Minute, 2)
	require.NotNil(t, v)
	v.Settle(nil, nil)
	idle, _ := q.state()
	require.False(t, idle, "not idle before it waits")
}
