package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
)

// walState is PRAGMA wal_checkpoint(NOOP): pages in the WAL, and how many
// of them are copied into the database.
func walState(ctx context.Context, t *testing.T, s *Store) (frames, copied int) {
	t.Helper()
	var busy int
	require.NoError(t, s.ckpt.QueryRowContext(ctx, "PRAGMA wal_checkpoint(NOOP)").Scan(&busy, &frames, &copied))
	return frames, copied
}

var inserted int

func insertN(ctx context.Context, t *testing.T, s *Store, host string, n int, now time.Time) {
	t.Helper()
	inserted++
	body := make([]byte, 4096)
	ps := make([]*store.DeliveryInsertParams, n)
	for i := range ps {
		ev := fmt.Sprintf("%s-%d-%d", host, inserted, i)
		ps[i] = &store.DeliveryInsertParams{ID: store.DeliveryID("github", ev, now), HostID: host, Source: "github",
			EventID: ev, RawBody: body, ReceivedAt: now, Headers: map[string]string{}}
	}
	_, err := s.DeliveryInsertBatch(ctx, ps)
	require.NoError(t, err)
}

// The checkpointer, not the writer, copies the WAL into the database once
// it holds CheckpointPages pages, and the next write starts the WAL over.
func TestCheckpointer(t *testing.T) {
	ctx := context.Background()
	s, err := OpenWith(ctx, filepath.Join(t.TempDir(), "cloud.db"), Options{CheckpointPages: 300})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	require.NoError(t, s.Migrate(ctx))
	var v int
	require.NoError(t, s.write.QueryRowContext(ctx, "PRAGMA wal_autocheckpoint").Scan(&v))
	require.Equal(t, 600, v, "the writer's own checkpoint is the backstop, at twice the mark")
	now := time.Now()
	_, err = s.HostCreate(ctx, &store.HostCreateParams{ID: "h", Name: "h", Now: now})
	require.NoError(t, err)

	// Batches of 10 webhooks of 4 KiB, until the WAL holds the mark.
	n := 0
	for {
		insertN(ctx, t, s, "h", 10, now)
		n += 10
		if frames, _ := walState(ctx, t, s); frames >= 300 {
			break
		}
	}
	require.Eventually(t, s.ckptTail.Load, 10*time.Second, 5*time.Millisecond, "the checkpointer copied the WAL")
	frames, copied := walState(ctx, t, s)
	require.Positive(t, copied)
	require.Less(t, frames, 600, "short of the writer's backstop: the checkpointer's copy")
	insertN(ctx, t, s, "h", 1, now.Add(time.Second))
	require.False(t, s.ckptTail.Load(), "the writer copied the rest")
	after, _ := walState(ctx, t, s)
	require.Less(t, after, frames, "the WAL started over")
	list, err := s.DeliveryList(ctx, &store.DeliveryListParams{HostID: "h", Limit: 1000})
	require.NoError(t, err)
	require.Len(t, list, n+1)
}

// Under the mark, nothing is copied.
func TestCheckpointNotDue(t *testing.T) {
	ctx := context.Background()
	s, err := OpenWith(ctx, filepath.Join(t.TempDir(), "cloud.db"), Options{CheckpointPages: 1000000})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	require.NoError(t, s.Migrate(ctx))
	due, err := s.checkpointDue(ctx)
	require.NoError(t, err)
	require.False(t, due)
	frames, copied := walState(ctx, t, s)
	require.Positive(t, frames)
	require.Zero(t, copied)
}

// A WAL that outgrew its mark while a read held it is cut back when it
// starts over, rather than kept at its largest for good.
func TestWALCutBackAfterItGrew(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "cloud.db")
	s, err := OpenWith(ctx, path, Options{CheckpointPages: 300})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	require.NoError(t, s.Migrate(ctx))
	now := time.Now()
	_, err = s.HostCreate(ctx, &store.HostCreateParams{ID: "h", Name: "h", Now: now})
	require.NoError(t, err)
	walSize := func() int64 {
		fi, err := os.Stat(path + "-wal")
		require.NoError(t, err)
		return fi.Size()
	}

	// A read holds its snapshot while the WAL grows to over three times
	// its mark: no checkpoint can start it over.
	read, err := s.read.BeginTx(ctx, nil)
	require.NoError(t, err)
	var n int
	require.NoError(t, read.QueryRowContext(ctx, "SELECT count(*) FROM deliveries").Scan(&n))
	for walSize() < 3*walSizeLimit(300) {
		insertN(ctx, t, s, "h", 10, now)
	}
	grown := walSize()
	require.NoError(t, read.Rollback())

	// Copied, then started over by the next write: cut back to the limit.
	_, err = s.ckpt.ExecContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)")
	require.NoError(t, err)
	insertN(ctx, t, s, "h", 1, now.Add(time.Second))
	require.LessOrEqual(t, walSize(), walSizeLimit(300), "from %d bytes", grown)
}
