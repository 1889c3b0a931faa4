package e2e

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store/postgres/pgtest"
	"github.com/relaykit/relay/shared"
)

// groupsCloudEnv makes members' presence quick to change: a member not
// heard from for 3 s (and whose socket is not open) is not online.
var groupsCloudEnv = []string{"RELAY_HOST_LATE_AFTER=3s", "RELAY_HOST_OFFLINE_AFTER=6s"}

// newGroup creates a group through the admin API with a github source of
// mode (the tests' secret, a fast retry schedule) and the members in
// order, and returns its id.
func (c *cloud) newGroup(name, mode string, members ...string) string {
	c.t.Helper()
	var g struct {
		ID string `json:"id"`
	}
	require.Equal(c.t, 201, c.admin("POST", "/api/groups", map[string]any{"name": name}, &g))
	require.True(c.t, strings.HasPrefix(g.ID, "g_"), g.ID)
	for _, m := range members {
		require.Equal(c.t, 200, c.admin("PUT", "/api/groups/"+g.ID+"/members/"+m, map[string]any{}, nil))
	}
	require.Equal(c.t, 201, c.admin("PUT", "/api/groups/"+g.ID+"/sources/github", map[string]any{
		"mode": mode, "secrets": []string{secret}, "options": guardOff, "retry_schedule_s": []int{0, 1, 1, 1, 1}}, nil))
	return g.ID
}

// member is a host of a group with its own local app.
type member struct {
	id   string
	rc   *receiver
	host *host
}

// newMembers starts n claimed hosts, each forwarding to a receiver of its
// own.
func newMembers(t *testing.T, c *cloud, n int) []*member {
	t.Helper()
	out := make([]*member, n)
	for i := range out {
		id, code := c.newHost(fmt.Sprintf("member %d", i), secret)
		rc := startReceiver(t)
		out[i] = &member{id: id, rc: rc, host: startHost(t, c.url, code, forwardTo(rc.url, nil))}
	}
	return out
}

// A fanout group of three: every member's app gets each webhook exactly
// once, byte for byte, with the provider's headers, the group named in
// X-Relay-Group, and an idempotency key of its own (each member's delivery
// is its own). The answer to the provider is one delivery id.
func TestGroupFanout(t *testing.T) {
	t.Parallel()
	eachEngine(t, func(t *testing.T, dbURL string) {
		c := startCloud(t, dbURL, groupsCloudEnv...)
		ms := newMembers(t, c, 3)
		g := c.newGroup("everyone", "fanout", ms[0].id, ms[1].id, ms[2].id)

		payloads := githubPayloads(t)[:5]
		for i, p := range payloads {
			id := sendGitHub(t, c.url, g, p.event, fmt.Sprintf("fan-%d", i), p.body)
			require.Contains(t, id, ms[0].id, "answered with the first member's delivery")
		}
		for _, m := range ms {
			eventually(t, 30*time.Second, "every webhook reached "+m.id, func() bool { return m.rc.count() == len(payloads) })
		}
		keys := map[string]bool{}
		for _, m := range ms {
			got := m.rc.snapshot()
			require.Len(t, got, len(payloads), "each exactly once")
			byDelivery := map[string][]byte{}
			for key, rs := range got {
				require.Len(t, rs, 1)
				require.Equal(t, g, rs[0].Header.Get(shared.HeaderGroup))
				require.False(t, keys[key], "each member's delivery is its own")
				keys[key] = true
				byDelivery[rs[0].Header.Get("X-GitHub-Delivery")] = rs[0].Body
			}
			for i, p := range payloads {
				require.True(t, bytes.Equal(p.body, byDelivery[fmt.Sprintf("fan-%d", i)]), "byte for byte")
			}
		}
		// The provider sends one again: a duplicate, run by no one again.
		status, resp, err := signGitHub(secret, payloads[0].event, "fan-0", payloads[0].body).send(c.url, g)
		require.NoError(t, err)
		require.Equal(t, 200, status)
		require.Equal(t, shared.IntakeDuplicate, resp.Status)

		// A member removed gets no later webhooks; the others do.
		require.Equal(t, 200, c.admin("DELETE", "/api/groups/"+g+"/members/"+ms[2].id, nil, nil))
		sendGitHub(t, c.url, g, payloads[0].event, "fan-after", payloads[0].body)
		for _, m := range ms[:2] {
			eventually(t, 30*time.Second, "the later webhook reached "+m.id, func() bool { return m.rc.count() == len(payloads)+1 })
		}
		require.Equal(t, len(payloads), ms[2].rc.count(), "the removed member got nothing more")

		// A group deactivated takes no more webhooks: 410, as a host's.
		require.Equal(t, 200, c.admin("POST", "/api/groups/"+g+"/deactivate", nil, nil))
		eventually(t, 15*time.Second, "the deactivated group's URL answers 410", func() bool {
			status, _, err := signGitHub(secret, payloads[0].event, "fan-late", payloads[0].body).send(c.url, g)
			return err == nil && status == http.StatusGone
		})
	})
}

// A member removed with fanout deliveries still queued for it: they are
// cancelled (dead-lettered, with why) and never run when it comes back.
func TestGroupMemberRemovedCancelsItsQueue(t *testing.T) {
	t.Parallel()
	eachEngine(t, func(t *testing.T, dbURL string) {
		c := startCloud(t, dbURL, groupsCloudEnv...)
		ms := newMembers(t, c, 2)
		g := c.newGroup("pair", "fanout", ms[0].id, ms[1].id)
		ms[1].host.kill()
		p := githubPayloads(t)[0]
		sendGitHub(t, c.url, g, p.event, "queued-1", p.body)
		sendGitHub(t, c.url, g, p.event, "queued-2", p.body)
		eventually(t, 30*time.Second, "the member still running got both", func() bool { return ms[0].rc.count() == 2 })

		var removed map[string]any
		require.Equal(t, 200, c.admin("DELETE", "/api/groups/"+g+"/members/"+ms[1].id, nil, &removed))
		require.EqualValues(t, 2, removed["cancelled"], "%v", removed)
		dlq := c.deliveries(ms[1].id, "dlq")
		require.Len(t, dlq, 2, "kept where an operator sees them")
		require.Contains(t, c.delivery(ms[1].id, dlq[0].DeliveryID).reasons(), "left the group")

		// Back, it is handed its own webhook, sent after the cancelled
		// ones (older work would come first), and nothing of the group's.
		ms[1].host.start()
		own := sendGitHub(t, c.url, ms[1].id, p.event, "own-after", p.body)
		eventually(t, 30*time.Second, "the member's own webhook ran", func() bool { return ms[1].rc.count() > 0 })
		require.Equal(t, []string{own}, keysOf(ms[1].rc), "cancelled deliveries never run")
	})
}

// keysOf is the idempotency keys a receiver got.
func keysOf(rc *receiver) []string {
	var out []string
	for k := range rc.snapshot() {
		out = append(out, k)
	}
	return out
}

// An any group of three with one member stopped: every webhook is run once,
// by one of the two running members, both of which take a share; nothing
// waits for the stopped one. Then the member holding work is killed in the
// middle of it: what it held is run by the member left, its attempts given
// back. One delivery id for each webhook, whoever ran it.
func TestGroupAnyFailover(t *testing.T) {
	t.Parallel()
	eachEngine(t, func(t *testing.T, dbURL string) {
		c := startCloud(t, dbURL, groupsCloudEnv...)
		ms := newMembers(t, c, 3)
		g := c.newGroup("workers", "any", ms[0].id, ms[1].id, ms[2].id)
		ms[1].host.kill()

		p := githubPayloads(t)[0]
		const n = 12
		for i := range n {
			sendGitHub(t, c.url, g, p.event, fmt.Sprintf("any-%d", i), p.body)
		}
		total := func() int { return ms[0].rc.count() + ms[2].rc.count() }
		eventually(t, 30*time.Second, "every webhook run by a running member", func() bool { return total() == n })
		require.Zero(t, ms[1].rc.count())
		require.Positive(t, ms[0].rc.count(), "both running members take a share")
		require.Positive(t, ms[2].rc.count(), "both running members take a share")
		seen := map[string]bool{}
		for _, m := range []*member{ms[0], ms[2]} {
			for key, rs := range m.rc.snapshot() {
				require.Len(t, rs, 1, "run once")
				require.False(t, seen[key], "by one member")
				seen[key] = true
				require.Equal(t, g, rs[0].Header.Get(shared.HeaderGroup))
			}
		}

		// The first member's app hangs on whatever it is handed; killed,
		// what it held is run by the third.
		hang := make(chan struct{})
		t.Cleanup(func() { close(hang) })
		ms[0].rc.before = func(*http.Request) { <-hang }
		before := ms[0].rc.count()
		var late []string
		for i := range n {
			late = append(late, sendGitHub(t, c.url, g, p.event, fmt.Sprintf("any-late-%d", i), p.body))
		}
		eventually(t, 20*time.Second, "the first member holds work", func() bool { return ms[0].rc.count() > before })
		ms[0].host.kill()
		eventually(t, 60*time.Second, "every later webhook run by the member left", func() bool {
			got := ms[2].rc.snapshot()
			for _, id := range late {
				if _, ok := got[id]; !ok {
					return false
				}
			}
			return true
		})
		for _, id := range late {
			eventually(t, 30*time.Second, id+" acked by the member left", func() bool {
				return c.delivery(ms[2].id, id).Delivery.Status == "acked"
			})
		}
	})
}

// An any group whose first member's handler fails: the next attempt is
// the other member's ("try the next one"), which runs it; the audit trail
// says it was handed on, and the key is the same on both members.
func TestGroupAnyHandlerFailsOnOneMember(t *testing.T) {
	t.Parallel()
	eachEngine(t, func(t *testing.T, dbURL string) {
		c := startCloud(t, dbURL, groupsCloudEnv...)
		var failing atomic.Int32
		app := serveLocal(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			failing.Add(1)
			w.WriteHeader(500)
		}))
		badID, badCode := c.newHost("failing member", secret)
		startHost(t, c.url, badCode, forwardTo(app+"/hook", nil))
		good := newMembers(t, c, 1)[0]
		g := c.newGroup("retrying", "any", badID, good.id)

		p := githubPayloads(t)[0]
		id := sendGitHub(t, c.url, g, p.event, "fails-first", p.body)
		eventually(t, 30*time.Second, "run by the other member", func() bool { return good.rc.count() == 1 })
		require.Contains(t, good.rc.snapshot(), id, "the same delivery, the same idempotency key")
		require.Positive(t, failing.Load(), "the first attempt was the failing member's")
		eventually(t, 30*time.Second, "acked by the other member", func() bool { return c.delivery(good.id, id).Delivery.Status == "acked" })
		trail := c.delivery(good.id, id).reasons()
		require.Contains(t, trail, "received (held by "+badID+")")
		require.Contains(t, trail, "handed to "+good.id)
	})
}

// An any group across two replicas on one Postgres: its three members hold
// sockets on different replicas, webhooks arrive at both; each is run by
// exactly one member (never leased to two at once), every member running
// its share, whichever replica its socket is on.
func TestGroupAnyAcrossReplicas(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	env := append([]string{
		"RELAY_JWT_KEY=" + "replicas-share-this-jwt-key-of-32+-bytes",
		"RELAY_SECRET_KEYS=" + base64.StdEncoding.EncodeToString([]byte("replicas share this 32-byte key!")),
	}, groupsCloudEnv...)
	a, b := startCloud(t, dbURL, env...), startCloud(t, dbURL, env...)
	ms := make([]*member, 3)
	for i, c := range []*cloud{a, b, a} {
		id, code := a.newHost(fmt.Sprintf("replica member %d", i), secret)
		rc := startReceiver(t)
		ms[i] = &member{id: id, rc: rc, host: startHost(t, c.url, code, forwardTo(rc.url, nil))}
	}
	g := b.newGroup("across", "any", ms[0].id, ms[1].id, ms[2].id)

	p := githubPayloads(t)[0]
	var ids []string
	for i := range 30 {
		c := []*cloud{a, b}[i%2]
		ids = append(ids, sendGitHub(t, c.url, g, p.event, fmt.Sprintf("across-%d", i), p.body))
	}
	eventually(t, 60*time.Second, "every webhook run", func() bool { return len(unionKeys(ms[0].rc, ms[1].rc, ms[2].rc)) == len(ids) })
	runs := 0
	for _, m := range ms {
		require.Positive(t, m.rc.count(), "%s takes a share", m.id)
		runs += m.rc.count()
	}
	require.Equal(t, len(ids), runs, "each run once, by one member")
	for _, id := range ids {
		eventually(t, 30*time.Second, id+" acked", func() bool {
			for _, m := range ms {
				var d cloudDelivery
				if a.admin("GET", "/api/hosts/"+m.id+"/webhooks/"+id, nil, &d) == 200 {
					return d.Delivery.Status == "acked"
				}
			}
			return false
		})
	}
}

// unionKeys is the idempotency keys the receivers got.
func unionKeys(rcs ...*receiver) map[string]bool {
	out := map[string]bool{}
	for _, rc := range rcs {
		for k := range rc.snapshot() {
			out[k] = true
		}
	}
	return out
}

// An any group deactivated while its webhooks wait on a member that is not
// running: its URL takes no more (410), and what it holds is delivered as
// before, handed to the member that comes back.
func TestGroupDeactivatedDeliversWhatItHolds(t *testing.T) {
	t.Parallel()
	eachEngine(t, func(t *testing.T, dbURL string) {
		c := startCloud(t, dbURL, groupsCloudEnv...)
		ms := newMembers(t, c, 2)
		g := c.newGroup("winding down", "any", ms[0].id, ms[1].id)
		ms[0].host.kill()
		ms[1].host.kill()
		eventually(t, 30*time.Second, "neither member online", func() bool {
			var got shared.Group
			require.Equal(t, 200, c.admin("GET", "/api/groups/"+g, nil, &got))
			for _, m := range got.Members {
				if m.Presence == "online" {
					return false
				}
			}
			return true
		})

		p := githubPayloads(t)[0]
		var held []string
		for i := range 3 {
			held = append(held, sendGitHub(t, c.url, g, p.event, fmt.Sprintf("held-%d", i), p.body))
		}
		for _, id := range held {
			require.Equal(t, "queued", c.delivery(ms[0].id, id).Delivery.Status, "held by the first member, waiting")
		}
		require.Equal(t, 200, c.admin("POST", "/api/groups/"+g+"/deactivate", nil, nil))
		eventually(t, 15*time.Second, "the deactivated group's URL answers 410", func() bool {
			status, _, err := signGitHub(secret, p.event, "held-late", p.body).send(c.url, g)
			return err == nil && status == http.StatusGone
		})

		ms[1].host.start()
		eventually(t, 30*time.Second, "what the group held run by the member back", func() bool { return ms[1].rc.count() == len(held) })
		for _, id := range held {
			require.Contains(t, ms[1].rc.snapshot(), id)
			eventually(t, 30*time.Second, id+" acked", func() bool { return c.delivery(ms[1].id, id).Delivery.Status == "acked" })
			require.Contains(t, c.delivery(ms[1].id, id).reasons(), "handed to "+ms[1].id)
		}
		require.Zero(t, ms[0].rc.count())
	})
}
