package sqlite

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNumbered(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`SELECT 1`: `SELECT 1`,
		`INSERT INTO t (a, b, c) VALUES ($1, $2, $2)`:    `INSERT INTO t (a, b, c) VALUES (?1, ?2, ?2)`,
		`UPDATE t SET a = $10 WHERE b = '$1' AND c = $1`: `UPDATE t SET a = ?10 WHERE b = '$1' AND c = ?1`,
		`SELECT "$1" FROM t WHERE x = $3`:                `SELECT "$1" FROM t WHERE x = ?3`,
		`SELECT '$' || $1`:                               `SELECT '$' || ?1`,
	} {
		require.Equal(t, want, numbered(in), in)
	}
}
