package store

import (
	"encoding/json"
	"fmt"
	"time"
)

// A retry schedule and the number of attempts, as every engine resolves
// and stores them.

// DefaultMaxAttempts is how many attempts a delivery without a schedule of
// its own gets: one per delay of the delivery core's default policy
// (delivery.DefaultRetryPolicy).
const DefaultMaxAttempts = 5

// MaxAttemptsFor resolves a configured number of attempts: n when positive,
// else one per entry of delays, else DefaultMaxAttempts.
func MaxAttemptsFor(n int, delays []time.Duration) int {
	switch {
	case n > 0:
		return n
	case len(delays) > 0:
		return len(delays)
	}
	return DefaultMaxAttempts
}

// EncodeDelays is a retry schedule as stored: a JSON array of milliseconds,
// or nil (NULL, the default policy) for an empty schedule.
func EncodeDelays(delays []time.Duration) *string {
	if len(delays) == 0 {
		return nil
	}
	ms := make([]int64, len(delays))
	for i, d := range delays {
		ms[i] = d.Milliseconds()
	}
	b, _ := json.Marshal(ms) // a slice of integers always encodes
	s := string(b)
	return &s
}

// DecodeDelays reads a stored retry schedule; NULL (nil) is nil.
func DecodeDelays(stored *string) ([]time.Duration, error) {
	if stored == nil {
		return nil, nil
	}
	var ms []int64
	if err := json.Unmarshal([]byte(*stored), &ms); err != nil {
		return nil, fmt.Errorf("retry delays: %w", err)
	}
	if len(ms) == 0 {
		return nil, nil
	}
	out := make([]time.Duration, len(ms))
	for i, v := range ms {
		out[i] = time.Duration(v) * time.Millisecond
	}
	return out, nil
}
