package server

import (
	"math"
	"time"
)

// retryAfterSeconds is a Retry-After value: whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}
