package limits

import (
	"sync"
	"time"
)

// LogBudget bounds log lines that anyone can cause: at most perMin lines a
// minute per key (and as many at once), and each line that gets through says
// how many of its key went unlogged before it. Callers use a bounded set of
// keys (a route and status, or one key), never a value a client chooses.
type LogBudget struct {
	sample   *Sampler
	mu       sync.Mutex
	unlogged map[string]int
}

// NewLogBudget lets perMin lines a minute through per key.
func NewLogBudget(perMin int) *LogBudget {
	return &LogBudget{sample: NewSampler(perMin, perMin), unlogged: make(map[string]int)}
}

// Take reports whether a line under key may be logged now and, when it may,
// how many lines under key were left out since the last one.
func (b *LogBudget) Take(key string, now time.Time) (ok bool, unlogged int) {
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
