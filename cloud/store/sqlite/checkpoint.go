package sqlite

import "context"

// The checkpointer: see walCheckpointPages.

// checkpointer copies the WAL into the database once it holds
// ckptPages pages not yet copied, woken by each write's commit, until ctx
// ends (Close).
func (s *Store) checkpointer(ctx context.Context) {
	defer close(s.ckptDone)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.ckptPoke:
		}
		// An error leaves the copy to the next wake-up, and to the
		// writer's own autocheckpoint past twice the mark.
		_, _ = s.checkpointDue(ctx)
	}
}

// checkpointDue copies the WAL into the database (a PASSIVE checkpoint,
// alongside the writer's transactions) when it holds ckptPages pages not
// yet copied, and says whether it did. The pages committed while it copied
// are left to the writer (tail): a WAL always copied behind a running
// writer would never be started over, and would grow.
func (s *Store) checkpointDue(ctx context.Context) (bool, error) {
	var busy, frames, copied int
	if err := s.ckpt.QueryRowContext(ctx, "PRAGMA wal_checkpoint(NOOP)").Scan(&busy, &frames, &copied); err != nil {
		return false, err
	}
	if frames-copied < s.ckptPages {
		return false, nil
	}
	if err := s.ckpt.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &copied); err != nil {
		return false, err
	}
	s.ckptTail.Store(true)
	return true, nil
}

// checkpointTail copies, on the writer's connection and before its next
// transaction, what the checkpointer left: the pages committed while it
// copied. That transaction then starts the WAL over. A PASSIVE checkpoint
// waits for no one; this one copies a few batches' pages, not the WAL's
// ckptPages.
func (s *Store) checkpointTail(ctx context.Context) {
	if s.ckptTail.CompareAndSwap(true, false) {
		// An error leaves the copy to the next checkpoint.
		_, _ = s.write.ExecContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)")
	}
}

// pokeCheckpointer tells the checkpointer a write committed.
func (s *Store) pokeCheckpointer() {
	select {
	case s.ckptPoke <- struct{}{}:
	default:
	}
}
