package postgres

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNumbered(t *testing.T) {
	require.Equal(t, "SELECT 1", numbered("SELECT 1"))
	require.Equal(t, "a = $1 AND (b, c) < ($2, $3::text) LIMIT $4", numbered("a = ? AND (b, c) < (?, ?::text) LIMIT ?"))
}
