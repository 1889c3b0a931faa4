package main

import (
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/verify"
)

// TestMixWebhooksVerify: every kind of the mix, built as the load generator
// sends it, passes the cloud's own verification, and the event id the cloud
// dedupes on is the one the sender made.
func TestMixWebhooksVerify(t *testing.T) {
	m, err := newMix("mix")
	require.NoError(t, err)
	g, err := newIDs("random")
	require.NoError(t, err)
	secrets := map[string][][]byte{"github": {[]byte(secret)}, "stripe": {[]byte(stripeSecret)}}
	seen := map[string]bool{}
	for i, k := range m.kinds {
		w := k.build(g.next(k.provider, int64(i)), time.Now())
		p, ok := verify.Lookup(k.provider)
		require.True(t, ok)
		r := &verify.Request{Header: w.header, Body: w.body}
		require.NoError(t, p.Verify(r, secrets[k.provider], nil), k.name)
		ev := p.Event(r, nil)
		require.Equal(t, w.id, ev.ID, k.name)
		require.Equal(t, k.event, ev.Type, k.name)
		require.LessOrEqual(t, int64(len(w.body)), p.MaxBody(), k.name)
		require.True(t, json.Valid(w.body), k.name)
		seen[k.provider] = true
	}
	require.Equal(t, map[string]bool{"github": true, "stripe": true}, seen)
}

// TestMixWeights: the mix sends each kind as often as its weight says, in
// a fixed order, and its mean body is what the report prints.
func TestMixWeights(t *testing.T) {
	m, err := newMix("mix")
	require.NoError(t, err)
	counts := map[*kind]int{}
	var bytes int
	for i := int64(0); i < 10_000; i++ {
		k := m.kindOf(i)
		counts[k]++
		bytes += len(k.body)
	}
	for _, k := range m.kinds {
		require.Equal(t, k.weight*10, counts[k], k.name)
	}
	require.Equal(t, m.meanSize(), bytes/10_000)
	require.Greater(t, m.meanSize(), 10_000)
	// Consecutive requests are of different kinds, not runs of one.
	require.NotEqual(t, m.kindOf(0), m.kindOf(1))

	one, err := newMix("installation")
	require.NoError(t, err)
	require.Len(t, one.kinds, 1)
	require.Len(t, one.kinds[0].body, 3329)
	require.Equal(t, []string{"github"}, one.providers())
	_, err = newMix("huge")
	require.ErrorContains(t, err, "-payloads")
}

// TestBigPush: the large push is a push webhook of 300 KB and a little more,
// its commits distinct.
func TestBigPush(t *testing.T) {
	b, err := bigPush(bigPushSize)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(b), bigPushSize)
	require.Less(t, len(b), bigPushSize+10_000)
	var push struct {
		Ref     string
		After   string
		Commits []struct{ ID string }
	}
	require.NoError(t, json.Unmarshal(b, &push))
	require.Equal(t, "refs/heads/master", push.Ref)
	require.Greater(t, len(push.Commits), 50)
	ids := map[string]bool{}
	for _, c := range push.Commits {
		require.Regexp(t, `^[0-9a-f]{40}$`, c.ID)
		ids[c.ID] = true
	}
	require.Len(t, ids, len(push.Commits))
	require.Equal(t, push.Commits[len(push.Commits)-1].ID, push.After)
}

// TestIDs: random ids are in each provider's shape and do not repeat;
// counter ids are the old prefix-n.
func TestIDs(t *testing.T) {
	g, err := newIDs("random")
	require.NoError(t, err)
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	evt := regexp.MustCompile(`^evt_[0-9A-Za-z]{24}$`)
	seen := map[string]bool{}
	for i := int64(0); i < 1000; i++ {
		gh, st := g.next("github", i), g.next("stripe", i)
		require.Regexp(t, uuid, gh)
		require.Regexp(t, evt, st)
		require.False(t, seen[gh] || seen[st])
		seen[gh], seen[st] = true, true
	}
	c, err := newIDs("counter")
	require.NoError(t, err)
	require.Equal(t, c.prefix+"-7", c.next("github", 7))
	require.Equal(t, "evt_"+c.prefix+"_7", c.next("stripe", 7))
	_, err = newIDs("guid")
	require.ErrorContains(t, err, "-ids")
}

// TestReplays: with -dup, about that share of requests replays a webhook
// already accepted (the same id and body), none before one was.
func TestReplays(t *testing.T) {
	m, err := newMix("mix")
	require.NoError(t, err)
	g, err := newIDs("random")
	require.NoError(t, err)
	s := &sender{mix: m, ids: g, dup: 0.1, replays: newReplays(64)}
	for i := int64(0); i < 100; i++ {
		_, replayed := s.webhook(i)
		require.False(t, replayed, "nothing accepted yet")
	}
	accepted := map[string]string{}
	replays := 0
	for i := int64(0); i < 10_000; i++ {
		w, replayed := s.webhook(i)
		if replayed {
			replays++
			require.Equal(t, accepted[w.id], string(w.body))
			continue
		}
		accepted[w.id] = string(w.body)
		s.replays.add(w)
	}
	require.InDelta(t, 1000, replays, 150)
}

func TestEventIDOf(t *testing.T) {
	require.Equal(t, "9b2c-11", eventIDOf("github:9b2c-11:1764090000000"))
	require.Equal(t, "evt_1A", eventIDOf("stripe:evt_1A:1"))
}

// TestParseFlagsLoad: -ids, -payloads and -dup are checked.
func TestParseFlagsLoad(t *testing.T) {
	c, err := parseFlags(nil)
	require.NoError(t, err)
	require.Equal(t, "random", c.ids)
	require.Equal(t, "mix", c.payloads)
	require.Zero(t, c.dup)
	c, err = parseFlags([]string{"-ids", "counter", "-payloads", "installation", "-dup", "0.05"})
	require.NoError(t, err)
	require.Equal(t, "counter", c.ids)
	require.Equal(t, 0.05, c.dup)
	for _, bad := range [][]string{{"-ids", "x"}, {"-payloads", "x"}, {"-dup", "0.9"}, {"-dup", "-0.1"}} {
		_, err := parseFlags(bad)
		require.Error(t, err, "%q", bad)
	}
}

func TestUSPer(t *testing.T) {
	require.InDelta(t, 200, usPer(0.8, 4000), 1e-9)
	require.Equal(t, -1.0, usPer(-1, 4000), "CPU unknown (no Postgres on SQLite)")
	require.Equal(t, -1.0, usPer(0.5, 0))
	require.Equal(t, "200 / –", cpuSplit(usPer(0.8, 4000), usPer(-1, 4000)))
}
