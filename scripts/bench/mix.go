package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/relaykit/relay/scripts/internal/rig"
)

// The payloads the bench sends: real GitHub and Stripe webhook bodies (see
// testdata/SOURCES.md).
//
//go:embed testdata/github/*.json testdata/stripe/*.json
var payloadFiles embed.FS

// stripeSecret is the bench's Stripe endpoint secret, used as typed (as
// Stripe does with whsec_ secrets).
const stripeSecret = "whsec_bench_stripe_endpoint_secret"

// bigPushSize is the size of the large push in the mix: GitHub sends pushes
// of a few hundred KB (many commits, long file lists), far above the
// examples' few KB.
const bigPushSize = 300 << 10

// A kind is one payload of the mix and how often it is sent.
type kind struct {
	provider string // github or stripe: the source it is sent to
	event    string // X-GitHub-Event, or the Stripe event type
	name     string // as the report names it
	weight   int    // per thousand requests
	body     []byte // GitHub: as sent; Stripe: the template, its id cut out at idAt
	idAt     int    // Stripe: where the event id goes in body
	idLen    int    // Stripe: the length of the template's id
	sig      string // GitHub: X-Hub-Signature-256 of body (the id is a header)
}

// mixWeights is the mix, per thousand requests: mostly GitHub (CI and code
// events), some Stripe, an occasional 300 KB push. The mean body is about
// 15 KB.
var mixWeights = []struct {
	file   string
	weight int
}{
	{"github/push.json", 190},
	{"github/push.300k", 10},
	{"github/pull_request.opened.json", 80},
	{"github/issues.opened.json", 40},
	{"github/issue_comment.created.json", 80},
	{"github/check_run.completed.json", 150},
	{"github/check_suite.completed.json", 80},
	{"github/workflow_run.completed.json", 90},
	{"github/release.published.json", 10},
	{"github/installation.created.json", 20},
	{"github/ping.json", 10},
	{"stripe/payment_intent.succeeded.json", 80},
	{"stripe/invoice.paid.json", 60},
	{"stripe/customer.updated.json", 70},
	{"stripe/plan.created.json", 30},
}

// payloadMix is what the load generator sends: a table of kinds and, for
// each request index, which kind (a fixed pseudo-random choice by weight).
type payloadMix struct {
	kinds []*kind
	pick  [1000]uint8 // kind index by request slot
}

// checkMix says whether name is a mix newMix makes, without making it
// (that reads and signs every payload).
func checkMix(name string) error {
	switch name {
	case "mix", "installation":
		return nil
	}
	return fmt.Errorf("-payloads: unknown mix %q (mix, installation)", name)
}

// newMix builds the mix named by -payloads: "mix" (mixWeights), or a single
// GitHub installation webhook (3,329 bytes) as the bench sent before.
func newMix(name string) (*payloadMix, error) {
	if err := checkMix(name); err != nil {
		return nil, err
	}
	weights := mixWeights
	if name == "installation" {
		weights = weights[:0:0]
		weights = append(weights, struct {
			file   string
			weight int
		}{"github/installation.created.json", 1000})
	}
	m := &payloadMix{}
	slot := 0
	for _, w := range weights {
		k, err := loadKind(w.file)
		if err != nil {
			return nil, err
		}
		k.weight = w.weight
		for range w.weight {
			m.pick[slot] = uint8(len(m.kinds))
			slot++
		}
		m.kinds = append(m.kinds, k)
	}
	if slot != len(m.pick) {
		return nil, fmt.Errorf("payload mix weighs %d, not %d", slot, len(m.pick))
	}
	// Shuffle the slots with a fixed seed, so that consecutive requests
	// are of different kinds, the same ones every run.
	x := uint64(0x9e3779b97f4a7c15)
	for i := len(m.pick) - 1; i > 0; i-- {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		j := int(x % uint64(i+1))
		m.pick[i], m.pick[j] = m.pick[j], m.pick[i]
	}
	return m, nil
}

// kindOf is the kind of request i.
func (m *payloadMix) kindOf(i int64) *kind {
	return m.kinds[m.pick[uint64(i)%uint64(len(m.pick))]]
}

// meanSize is the mix's mean body size in bytes.
func (m *payloadMix) meanSize() int {
	var sum int
	for _, k := range m.kinds {
		sum += k.weight * len(k.body)
	}
	return sum / len(m.pick)
}

// providers lists the sources the mix sends to.
func (m *payloadMix) providers() []string {
	var out []string
	for _, k := range m.kinds {
		if !strings.Contains(strings.Join(out, ","), k.provider) {
			out = append(out, k.provider)
		}
	}
	return out
}

func loadKind(file string) (*kind, error) {
	provider, name := path.Split(file)
	provider = strings.TrimSuffix(provider, "/")
	k := &kind{provider: provider, name: strings.TrimSuffix(name, ".json")}
	var err error
	if file == "github/push.300k" {
		k.body, err = bigPush(bigPushSize)
	} else {
		k.body, err = payloadFiles.ReadFile("testdata/" + file)
	}
	if err != nil {
		return nil, err
	}
	switch provider {
	case "github":
		k.event, _, _ = strings.Cut(k.name, ".")
		k.sig = rig.GitHubSignature(secret, k.body)
	case "stripe":
		var env struct {
			ID, Type string
		}
		if err := json.Unmarshal(k.body, &env); err != nil || !strings.HasPrefix(env.ID, "evt_") {
			return nil, fmt.Errorf("%s: not a Stripe event (%v)", file, err)
		}
		k.event = env.Type
		q := []byte(`"` + env.ID + `"`)
		at := bytes.Index(k.body, q)
		if at < 0 || bytes.Count(k.body, q) != 1 {
			return nil, fmt.Errorf("%s: the event id is not in it exactly once", file)
		}
		k.idAt, k.idLen = at+1, len(env.ID)
	default:
		return nil, fmt.Errorf("%s: unknown provider %q", file, provider)
	}
	return k, nil
}

// bigPush makes a push webhook of at least size bytes from the real one in
// testdata (push.json, one commit): the same envelope with commits added,
// each a copy of the real commit with its own id and message and a long
// list of modified files, as a large push lists them. It is re-encoded
// with two-space indents as GitHub sends it (keys in Go's sorted order).
func bigPush(size int) ([]byte, error) {
	raw, err := payloadFiles.ReadFile("testdata/github/push.json")
	if err != nil {
		return nil, err
	}
	var push map[string]any
	if err := json.Unmarshal(raw, &push); err != nil {
		return nil, err
	}
	commits, _ := push["commits"].([]any)
	if len(commits) == 0 {
		return nil, fmt.Errorf("push.json has no commit to copy")
	}
	first, _ := commits[0].(map[string]any)
	for n := 1; ; n++ {
		out, err := json.MarshalIndent(push, "", "  ")
		if err != nil {
			return nil, err
		}
		if len(out) >= size {
			return out, nil
		}
		c := make(map[string]any, len(first))
		for k, v := range first {
			c[k] = v
		}
		sum := sha256.Sum256([]byte("bench-commit-" + strconv.Itoa(n)))
		id := hex.EncodeToString(sum[:20])
		c["id"] = id
		c["tree_id"] = hex.EncodeToString(sum[12:32])
		c["url"] = "https://github.com/Codertocat/Hello-World/commit/" + id
		c["message"] = fmt.Sprintf("Update the handbook, part %d\n\nRewrite the sections on intake and retries.", n)
		files := make([]string, 40)
		for i := range files {
			files[i] = fmt.Sprintf("docs/handbook/part-%03d/section-%02d.md", n, i)
		}
		c["modified"] = files
		commits = append(commits, c)
		push["commits"] = commits
		push["head_commit"] = c
		push["after"] = id
	}
}

// ids makes each request's event id: "random" in the provider's own shape
// (a GitHub delivery is a UUID, a Stripe event evt_ and 24 letters and
// digits), or "counter", a run prefix and the request's number, the shape
// the bench sent before (it flatters an engine whose dedupe index then
// grows at one end).
type ids struct {
	counter bool
	prefix  string
}

func newIDs(mode string) (*ids, error) {
	switch mode {
	case "random":
		return &ids{}, nil
	case "counter":
		var p [8]byte
		_, _ = rand.Read(p[:])
		return &ids{counter: true, prefix: hex.EncodeToString(p[:])}, nil
	}
	return nil, fmt.Errorf("-ids: unknown mode %q (random, counter)", mode)
}

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// next is request i's event id for provider.
func (g *ids) next(provider string, i int64) string {
	if g.counter {
		if provider == "stripe" {
			return "evt_" + g.prefix + "_" + strconv.FormatInt(i, 10)
		}
		return g.prefix + "-" + strconv.FormatInt(i, 10)
	}
	if provider == "stripe" {
		var b [24]byte
		_, _ = rand.Read(b[:])
		for j := range b {
			b[j] = base62[int(b[j])%len(base62)]
		}
		return "evt_" + string(b[:])
	}
	return rig.NewDeliveryID()
}

// webhook is one request as a provider sends it.
type webhook struct {
	provider string
	id       string // the provider's event id: the cloud's dedupe key
	body     []byte
	header   http.Header
}

// build makes the request of kind k with event id id, signed now.
func (k *kind) build(id string, now time.Time) webhook {
	w := webhook{provider: k.provider, id: id}
	switch k.provider {
	case "github":
		w.body = k.body
		w.header = rig.GitHubHeaders(k.event, id, k.sig)
	case "stripe":
		b := make([]byte, 0, len(k.body)-k.idLen+len(id))
		b = append(b, k.body[:k.idAt]...)
		b = append(b, id...)
		b = append(b, k.body[k.idAt+k.idLen:]...)
		w.body = b
		t := strconv.FormatInt(now.Unix(), 10)
		m := hmac.New(sha256.New, []byte(stripeSecret))
		m.Write([]byte(t + "."))
		m.Write(b)
		w.header = http.Header{
			"Content-Type":     {"application/json; charset=utf-8"},
			"User-Agent":       {"Stripe/1.0 (+https://stripe.com/docs/webhooks)"},
			"Stripe-Signature": {"t=" + t + ",v1=" + hex.EncodeToString(m.Sum(nil))},
		}
	}
	return w
}

// replays keeps the last accepted webhooks for -dup to send again, as a
// provider retries one whose answer it did not see.
type replays struct {
	mu   sync.Mutex
	ring []webhook
	n    int
}

func newReplays(size int) *replays { return &replays{ring: make([]webhook, size)} }

func (r *replays) add(w webhook) {
	r.mu.Lock()
	r.ring[r.n%len(r.ring)] = w
	r.n++
	r.mu.Unlock()
}

// pick returns an accepted webhook chosen by x, false if none is yet.
func (r *replays) pick(x uint64) (webhook, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == 0 {
		return webhook{}, false
	}
	return r.ring[x%uint64(min(r.n, len(r.ring)))], true
}

// chance is a fixed pseudo-random number in [0, 1) for request i (so a
// run's duplicates fall on the same requests every time).
func chance(i int64) float64 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(i))
	s := sha256.Sum256(b[:])
	return float64(binary.LittleEndian.Uint64(s[:8])>>11) / (1 << 53)
}
