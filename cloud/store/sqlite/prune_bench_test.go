package sqlite_test

import (
	"testing"

	"github.com/relaykit/relay/cloud/store/sqlite/sqlitetest"
	"github.com/relaykit/relay/cloud/store/storetest"
)

// BenchmarkPrune is retention's cost on SQLite (storetest.BenchPrune).
//
//	go test -run '^$' -bench Prune -benchtime 50000x ./cloud/store/sqlite/
func BenchmarkPrune(b *testing.B) { storetest.BenchPrune(b, sqlitetest.Open(b)) }
