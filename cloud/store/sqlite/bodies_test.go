package sqlite

import (
	"bytes"
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
)

// storedBody is how delivery id's body is stored: its length and codec.
func storedBody(ctx context.Context, t *testing.T, s *Store, id string) (size int, codec int64) {
	t.Helper()
	require.NoError(t, s.read.QueryRowContext(ctx, `SELECT length(b.body), b.codec FROM deliveries d
		JOIN delivery_bodies b ON b.id = d.body_id WHERE `+idKey, id, id).Scan(&size, &codec))
	return size, codec
}

// Bodies worth compressing are stored compressed, whether the insert
// packed them (alone) or its caller did (the group commit); the others as
// they are. A migration down writes every body back as received; bodies
// stored before the migration are read as they are.
func TestBodiesStoredPacked(t *testing.T) {
	ctx := context.Background()
	s := migrated(ctx, t)
	now := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	createHosts(ctx, t, s, now, "h-a")
	grouped := store.GroupCommit(s, store.GroupOptions{})
	t.Cleanup(func() { _ = grouped.Close() })
	random := make([]byte, 8<<10)
	_, _ = rand.Read(random)
	json := bytes.Repeat([]byte(`{"id":"4b825dc642cb6eb9a060e54bf8d69288fbee4904","files":["cloud/store/sqlite/bodies.go"]},`), 700)
	type sent struct {
		body  []byte
		codec int64
	}
	want := map[string]sent{}
	for i, c := range []struct {
		via   store.Store
		body  []byte
		codec int64
	}{
		{s, json, codecS2}, {grouped, json, codecS2},
		{s, random, codecRaw}, {grouped, random, codecRaw},
		{grouped, []byte(`{"zen":"Half measures are as bad as nothing at all."}`), codecRaw},
		{grouped, bytes.Repeat([]byte("a"), packMin-1), codecRaw},
		{grouped, bytes.Repeat([]byte("a"), packMin), codecS2},
	} {
		p := &store.DeliveryInsertParams{ID: store.DeliveryID("github", string(rune('a'+i)), now),
			HostID: "h-a", Source: "github", EventID: string(rune('a' + i)), RawBody: c.body, ReceivedAt: now, Headers: map[string]string{}}
		res, err := c.via.DeliveryInsert(ctx, p)
		require.NoError(t, err)
		if c.via == grouped {
			require.NotNil(t, p.Packed, "case %d: packed by its caller, before the shared commit", i)
			require.Equal(t, c.codec, p.Packed.Codec, "case %d", i)
		} else {
			require.Nil(t, p.Packed, "case %d: packed by the insert", i)
		}
		id := res.Delivery.ID
		size, codec := storedBody(ctx, t, s, id)
		require.Equal(t, c.codec, codec, "case %d", i)
		if codec == codecS2 {
			require.Less(t, size, len(c.body)/4, "case %d: compressed", i)
		} else {
			require.Equal(t, len(c.body), size, "case %d", i)
		}
		want[id] = sent{c.body, codec}
	}
	check := func(how string) {
		t.Helper()
		for id, w := range want {
			d, err := s.DeliveryGet(ctx, "h-a", id)
			require.NoError(t, err)
			require.Equal(t, w.body, d.RawBody, "%s: %s read alone", how, id)
		}
	}
	check("stored")
	// A cloud from before the codec reads and writes raw_body: it fails
	// instead of handing a compressed body on as the webhook's.
	_, err := s.read.ExecContext(ctx, `SELECT raw_body FROM delivery_bodies`)
	require.ErrorContains(t, err, "no such column: raw_body")

	p := migrator(t, s)
	_, err = p.DownTo(ctx, 28)
	require.NoError(t, err)
	for id, w := range want {
		var body []byte
		require.NoError(t, s.read.QueryRowContext(ctx, `SELECT b.raw_body FROM deliveries d
			JOIN delivery_bodies b ON b.id = d.body_id WHERE `+idKey, id, id).Scan(&body))
		require.Equal(t, w.body, body, "down: %s as received", id)
	}
	_, err = p.Up(ctx)
	require.NoError(t, err)
	for id := range want {
		_, codec := storedBody(ctx, t, s, id)
		require.Equal(t, codecRaw, codec, "up again: %s kept as received", id)
	}
	check("migrated down and up")
	res, err := s.DeliveryLease(ctx, &store.DeliveryLeaseParams{HostID: "h-a", Max: 100, LeaseFor: time.Minute, Now: now})
	require.NoError(t, err)
	require.Len(t, res.Deliveries, len(want))
	for _, d := range res.Deliveries {
		require.Equal(t, want[d.ID].body, d.RawBody, "leased %s", d.ID)
	}
}

// A stored body that cannot be unpacked (an unknown codec, damaged data)
// is an error of the read, never other bytes.
func TestBodyDamagedIsAnError(t *testing.T) {
	ctx := context.Background()
	s := migrated(ctx, t)
	now := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	createHosts(ctx, t, s, now, "h-a")
	body := bytes.Repeat([]byte(`{"action":"completed","check_run":{"status":"completed"}},`), 100)
	for _, damage := range []string{
		`UPDATE delivery_bodies SET codec = 7`,
		`UPDATE delivery_bodies SET body = substr(body, 1, length(body) / 2)`,
	} {
		t.Run(damage, func(t *testing.T) {
			id := store.DeliveryID("github", damage, now)
			_, err := s.DeliveryInsert(ctx, &store.DeliveryInsertParams{ID: id, HostID: "h-a", Source: "github",
				EventID: damage, RawBody: body, ReceivedAt: now, Headers: map[string]string{}})
			require.NoError(t, err)
			_, err = s.write.ExecContext(ctx, damage+` WHERE id = (SELECT body_id FROM deliveries WHERE `+idKey+`)`, id, id)
			require.NoError(t, err)
			_, err = s.DeliveryGet(ctx, "h-a", id)
			require.ErrorContains(t, err, "stored body")
			_, err = s.DeliveryLease(ctx, &store.DeliveryLeaseParams{HostID: "h-a", Max: 10, LeaseFor: time.Minute, Now: now})
			require.ErrorContains(t, err, "stored body")
			_, err = s.write.ExecContext(ctx, `DELETE FROM deliveries WHERE `+idKey, id, id)
			require.NoError(t, err)
		})
	}
}
