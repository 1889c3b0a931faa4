package store

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTransitionsGuardTheirSources(t *testing.T) {
	require.True(t, TransitionLease.Allows(StatusQueued))
	require.True(t, TransitionLease.Allows(StatusRetrying))
	require.False(t, TransitionLease.Allows(StatusDelivering), "a leased delivery is never leased again")
	require.False(t, TransitionNack.Allows(StatusRetrying), "a nack after expiry is not counted twice")
	require.True(t, TransitionAck.Allows(StatusDLQ), "a late ack still means success")
	require.False(t, TransitionAck.Allows(StatusAcked))
	require.True(t, TransitionRevive.Allows(StatusDLQ))
	require.False(t, TransitionRevive.Allows(StatusAcked))
}

func TestLeaseCut(t *testing.T) {
	require.Equal(t, 0, LeaseCut(nil, 10, 100))
	require.Equal(t, 2, LeaseCut([]int{10, 10, 10}, 2, 0), "count bound")
	require.Equal(t, 2, LeaseCut([]int{40, 40, 40}, 10, 100), "byte bound")
	require.Equal(t, 1, LeaseCut([]int{500, 1}, 10, 100), "an oversized first delivery goes alone")
	require.Equal(t, 3, LeaseCut([]int{40, 40, 20, 1}, 10, 100), "exactly full")
}

func TestParseStatus(t *testing.T) {
	for _, s := range Statuses {
		got, err := ParseStatus(string(s))
		require.NoError(t, err)
		require.Equal(t, s, got)
	}
	_, err := ParseStatus("done")
	require.Error(t, err)
}

func TestTransitionsOfOperatorsAndStaleAcks(t *testing.T) {
	require.True(t, TransitionRetry.Allows(StatusDLQ))
	require.True(t, TransitionRetry.Allows(StatusRetrying))
	for _, s := range []Status{StatusQueued, StatusDelivering, StatusDelivered, StatusAcked} {
		require.False(t, TransitionRetry.Allows(s), "retry from %s", s)
	}
	require.False(t, TransitionAck.Allows(StatusQueued), "a queued delivery was not handed out since")
	require.True(t, TransitionAck.Allows(StatusDelivering), "even when handed out again")

	err := error(&TransitionError{DeliveryID: "d", Status: StatusAcked, Transition: TransitionRetry})
	require.ErrorIs(t, err, ErrConflict)
	require.Contains(t, err.Error(), "delivery d is acked")
}

func TestRetrySchedules(t *testing.T) {
	own := []time.Duration{0, 5 * time.Second}

	require.Equal(t, 7, MaxAttemptsFor(7, own))
	require.Equal(t, 2, MaxAttemptsFor(0, own))
	require.Equal(t, 5, MaxAttemptsFor(0, nil))

	require.Nil(t, EncodeDelays(nil))
	require.Nil(t, EncodeDelays([]time.Duration{}))
	enc := EncodeDelays([]time.Duration{0, 1500 * time.Millisecond, time.Hour})
	require.Equal(t, "[0,1500,3600000]", *enc)
	dec, err := DecodeDelays(enc)
	require.NoError(t, err)
	require.Equal(t, []time.Duration{0, 1500 * time.Millisecond, time.Hour}, dec)
	dec, err = DecodeDelays(nil)
	require.NoError(t, err)
	require.Nil(t, dec)
	bad := "[1,"
	_, err = DecodeDelays(&bad)
	require.Error(t, err)
}

func TestReceiveReason(t *testing.T) {
	for note, want := range map[string]string{
		"":                                "received",
		"over the host's rate limit":      "received (over the host's rate limit)",
		"(over the host's rate limit)":    "received (over the host's rate limit)",
		"  over the host's rate limit   ": "received (over the host's rate limit)",
	} {
		p := DeliveryInsertParams{ReceiveNote: note}
		require.Equal(t, want, p.ReceiveReason(), "%q", note)
	}
}
