package store

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine outlives them: the
// group commit's flushers stop with Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
