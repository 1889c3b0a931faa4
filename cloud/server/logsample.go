package server

import (
	"sync"
	"time"

	"github.com/relaykit/relay/cloud/limits"
)

// logBudget bounds log lines that anyone can cause: at most perMin lines a
// minute per key (and as many at once), and each line that gets through says
// how many of its key went unlogged before it. Callers use a bounded set of
// keys (a route and status, or one key), never a value a client chooses.
type logBudget struct {
	sample   *limits.Sampler
	mu       sync.Mutex
	unlogged map[string]int
}

func newLogBudget(perMin int) *logBudget {
	return &logBudget{sample: limits.NewSampler(perMin, perMin), unlogged: make(map[string]int)}
}

// take reports whether a line under key may be logged now and, when it may,
// how many lines under key were left out since the last one.
func (b *logBudget) take(key string, now time.Time) (ok bool, unlogged int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.sample.Allow(key, now) {
		b.unlogged[key]++
		return false, 0
	}
	unlogged = b.unlogged[key]
	delete(b.unlogged, key)
	return true, unlogged
}
