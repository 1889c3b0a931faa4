package delivery

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/relaykit/relay/cloud/store"
)

// Groups decides, once for every transport and engine, which member of a
// group holds a delivery of an any source:
//
//   - at intake, an online member: the first in turn with room on a
//     connection of the replica that stores it (pushed or answered at
//     once), else the next in turn (Pick), so that the members share the
//     work; when none is online, the first member in order holds it and
//     it waits, as a host's does;
//   - after a failed attempt, the next online member after the one that
//     failed it ("try the next one"), the attempt given back when the
//     holder vanished (its lease ran out, its socket closed, its answer
//     was lost: Handover) rather than its handler failing;
//   - while it waits, any member that is online: a delivery held by a
//     member that is offline, deactivated or no longer a member is handed
//     to one that is, and a backlog one member holds (stored while it was
//     the only one online, or none was) is spread over the members online
//     (Rebalance, every RebalanceEvery).
//
// A member is online when it has a socket open (in any replica, as far as
// this one was told), or when its last contact is within OnlineWithin (the
// presence settings' "late" threshold: what the console shows as online)
// and its socket has not closed since. A fanout source's deliveries are
// each a member's own and never change hands.
type Groups struct {
	store GroupStore
	clock clockwork.Clock
	log   *slog.Logger
	cfg   GroupsConfig

	mu      sync.Mutex
	rosters map[string]*store.GroupRoster // groups with an any source (active, or with work waiting), by id
	turn    map[string]int                // the next member Pick starts from, by group
	open    map[string]int64              // a host's open socket (its epoch), in any replica
	closed  map[string]time.Time          // when a host's socket last closed
	poke    chan struct{}                 // Run reads the rosters again at once
}

// GroupStore is what Groups uses of the store (a store.Store has it).
type GroupStore interface {
	GroupRosters(ctx context.Context) ([]*store.GroupRoster, error)
	DeliveryGroupWaiting(ctx context.Context, groupID string, except []string, limit int) ([]store.Waiting, error)
	DeliveryGroupHolders(ctx context.Context, groupID string) (map[string]int, error)
	DeliveryMove(ctx context.Context, p *store.DeliveryMoveParams) (int, error)
}

// GroupsConfig sets how Groups sees its members. Zero values take the
// defaults.
type GroupsConfig struct {
	// OnlineWithin: a member whose last contact is older is not online
	// (default 1 min, presence's late threshold).
	OnlineWithin time.Duration
	// RebalanceEvery is how often waiting deliveries of members that are
	// not online are handed over, and the rosters read again (default 2 s).
	RebalanceEvery time.Duration
	// Policy is the retry schedule of deliveries without their own.
	Policy RetryPolicy
}

// NewGroups returns the group router over st.
func NewGroups(st GroupStore, cfg GroupsConfig, clock clockwork.Clock, log *slog.Logger) *Groups {
	if cfg.OnlineWithin <= 0 {
		cfg.OnlineWithin = time.Minute
	}
	if cfg.RebalanceEvery <= 0 {
		cfg.RebalanceEvery = 2 * time.Second
	}
	cfg.Policy = cfg.Policy.OrDefault()
	return &Groups{store: st, clock: clock, log: log, cfg: cfg, rosters: map[string]*store.GroupRoster{},
		turn: map[string]int{}, open: map[string]int64{}, closed: map[string]time.Time{}, poke: make(chan struct{}, 1)}
}

// Refresh reads the rosters again.
func (g *Groups) Refresh(ctx context.Context) error {
	rs, err := g.store.GroupRosters(ctx)
	if err != nil {
		return fmt.Errorf("group rosters: %w", err)
	}
	byID := make(map[string]*store.GroupRoster, len(rs))
	for _, r := range rs {
		byID[r.GroupID] = r
	}
	g.mu.Lock()
	g.rosters = byID
	g.mu.Unlock()
	return nil
}

// Socket is told of hosts' sockets opening and closing in any replica: a
// member with a socket open is online; one whose socket closed is not
// until it is heard from again. A socket closed after another took it
// over changes nothing.
func (g *Groups) Socket(e store.SocketEvent) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e.Open {
		g.open[e.HostID] = e.Epoch
		// A member back: what waits on the others may be spread to it.
		g.Poke()
		return
	}
	if epoch, ok := g.open[e.HostID]; ok && epoch != e.Epoch {
		return
	}
	delete(g.open, e.HostID)
	g.closed[e.HostID] = g.clock.Now()
}

// Gone is told that a host left on this replica without a socket's close
// saying so: its long poll hung up, or it said it is stopping. Like a
// socket's close, it is not online until it is heard from again. (Other
// replicas see it go when its contact grows older than OnlineWithin.)
func (g *Groups) Gone(hostID string) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.open[hostID]; !ok {
		g.closed[hostID] = g.clock.Now()
	}
}

// online reports whether m is online at now: active, and with a socket
// open, or heard from within OnlineWithin and not since its socket
// closed. Called with g.mu held.
func (g *Groups) online(m store.RosterMember, now time.Time) bool {
	if m.Status != store.HostActive {
		return false
	}
	if _, ok := g.open[m.HostID]; ok {
		return true
	}
	if m.LastHeartbeatAt == nil || now.Sub(*m.LastHeartbeatAt) > g.cfg.OnlineWithin {
		return false
	}
	closed, ok := g.closed[m.HostID]
	return !ok || m.LastHeartbeatAt.After(closed)
}

// Pick lists who may hold a new delivery of the any source of group,
// first choice first: its online members of members (the group's, in
// order, as intake read them), starting from the next one in turn (so the
// members share the work); when none is online, the first member alone.
// Intake gives it to the first of them with room on a connection of this
// replica (Leaser.Reserve), else to the first. Empty when members is.
func (g *Groups) Pick(groupID string, members []string) []string {
	if len(members) == 0 {
		return nil
	}
	now := g.clock.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	online := g.onlineOf(groupID, now)
	start := g.turn[groupID] % len(members)
	var out []string
	for i := range members {
		if m := members[(start+i)%len(members)]; online[m] {
			if len(out) == 0 {
				g.turn[groupID] = (start + i + 1) % len(members)
			}
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		return members[:1]
	}
	return out
}

// onlineOf is the set of the group's members online at now (none when the
// group's roster is not known yet). Called with g.mu held.
func (g *Groups) onlineOf(groupID string, now time.Time) map[string]bool {
	out := map[string]bool{}
	if r := g.rosters[groupID]; r != nil {
		for _, m := range r.Members {
			if g.online(m, now) {
				out[m.HostID] = true
			}
		}
	}
	return out
}

// next is the online member after holder in the group's order, other than
// holder; "" when there is none. Called with g.mu held.
func (g *Groups) next(groupID, holder string, now time.Time) string {
	r := g.rosters[groupID]
	if r == nil {
		return ""
	}
	at := slices.IndexFunc(r.Members, func(m store.RosterMember) bool { return m.HostID == holder })
	for i := 1; i <= len(r.Members); i++ {
		m := r.Members[(at+i+len(r.Members))%len(r.Members)]
		if m.HostID != holder && g.online(m, now) {
			return m.HostID
		}
	}
	return ""
}

// Handover wraps the failure decision fail of a host's deliveries: a
// group's any delivery whose attempt failed goes, for its next attempt, to
// the next online member after the one that held it. When the holder
// vanished (vanished(tr): its lease ran out, its connection closed, its
// answer was lost) the attempt is given back, as a hand-back gives it,
// and the delivery is due again at once: the webhook did not fail, its
// holder went away. Other deliveries are decided by fail alone.
func (g *Groups) Handover(fail store.FailFunc, now time.Time) store.FailFunc {
	if g == nil {
		return fail
	}
	return func(f store.Failing) (store.Failure, bool) {
		fl, ok := fail(f)
		if !ok || !f.HandedOver() {
			return fl, ok
		}
		g.mu.Lock()
		to := g.next(f.GroupID, f.HostID, g.clock.Now())
		g.mu.Unlock()
		if to == "" {
			return fl, ok
		}
		// Its holder vanished: the attempt is given back (even the last:
		// the webhook did not fail), due at once on the next member.
		if tr := fl.Transition; vanished(tr) {
			if back, ok := handBackAs(tr, f, g.cfg.Policy, tr.Reason+"; handed to "+to, now); ok {
				back.MoveTo = to
				return back, true
			}
		}
		if fl.To != store.StatusRetrying {
			return fl, ok
		}
		fl.MoveTo = to
		fl.Reason += "; handed to " + to
		return fl, true
	}
}

// vanished reports whether tr fails an attempt because the holder went
// away rather than because its handler failed.
func vanished(tr store.Transition) bool {
	for _, v := range []store.Transition{store.TransitionExpire, store.TransitionExpireUnwritten,
		store.TransitionConnectionLost, store.TransitionRelease, store.TransitionAnswerLost} {
		if tr.Reason == v.Reason {
			return true
		}
	}
	return false
}

// Poke has Run read the rosters again at once: a group changed.
func (g *Groups) Poke() {
	select {
	case g.poke <- struct{}{}:
	default:
	}
}

// Run reads the rosters and hands over stranded deliveries every
// RebalanceEvery, and when poked, until ctx ends.
func (g *Groups) Run(ctx context.Context) {
	for {
		if err := g.Refresh(ctx); err != nil && ctx.Err() == nil {
			g.log.Warn("group rosters not read", "err", err)
		} else if _, err := g.Rebalance(ctx); err != nil && ctx.Err() == nil {
			g.log.Warn("group deliveries not handed over", "err", err)
		}
		t := g.clock.NewTimer(g.cfg.RebalanceEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.Chan():
		case <-g.poke:
			t.Stop()
		}
	}
}

// rebalanceBatch bounds the deliveries handed over per group per round
// (each a guarded update and an audit event, in one transaction).
const rebalanceBatch = 2000

// Rebalance hands each any group's waiting deliveries held by members that
// are not online (or no longer members) to the online members in turn.
// Returns how many moved.
func (g *Groups) Rebalance(ctx context.Context) (int, error) {
	now := g.clock.Now()
	type plan struct {
		groupID string
		online  []string
	}
	var plans []plan
	g.mu.Lock()
	for id, r := range g.rosters {
		p := plan{groupID: id}
		for _, m := range r.Members {
			if g.online(m, now) {
				p.online = append(p.online, m.HostID)
			}
		}
		if len(p.online) > 0 {
			plans = append(plans, p)
		}
	}
	g.mu.Unlock()
	moved := 0
	for _, p := range plans {
		// Held by a member that is not online, or by a host no longer a
		// member (removed): every holder that is not an online member.
		ws, err := g.store.DeliveryGroupWaiting(ctx, p.groupID, p.online, rebalanceBatch)
		if err != nil {
			return moved, err
		}
		if len(ws) == 0 {
			continue
		}
		moves := make([]store.DeliveryMove, len(ws))
		g.mu.Lock()
		for i, w := range ws {
			start := g.turn[p.groupID]
			to := p.online[start%len(p.online)]
			g.turn[p.groupID] = (start + 1) % len(p.online)
			moves[i] = store.DeliveryMove{ID: w.ID, From: w.HostID, To: to,
				Reason: "handed to " + to + ": " + w.HostID + " is not online"}
		}
		g.mu.Unlock()
		n, err := g.store.DeliveryMove(ctx, &store.DeliveryMoveParams{GroupID: p.groupID, Moves: moves, Now: now.UTC().Truncate(time.Millisecond)})
		moved += n
		if err != nil {
			return moved, err
		}
	}
	for _, p := range plans {
		n, err := g.spread(ctx, p.groupID, p.online, now)
		moved += n
		if err != nil {
			return moved, err
		}
	}
	return moved, nil
}

// spreadSlack is how many waiting deliveries more than its share a member
// may hold before some go to the others: a member draining its own takes
// them in batches, and moving a handful back and forth is not worth it.
const spreadSlack = 16

// spread evens out the group's waiting any deliveries over its online
// members: a member holding more than its share (plus spreadSlack) hands
// its newest surplus to those holding less, at most rebalanceBatch a
// round. It returns how many moved.
func (g *Groups) spread(ctx context.Context, groupID string, online []string, now time.Time) (int, error) {
	if len(online) < 2 {
		return 0, nil
	}
	counts, err := g.store.DeliveryGroupHolders(ctx, groupID)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, h := range online {
		total += counts[h]
	}
	share := (total + len(online) - 1) / len(online)
	var moves []store.DeliveryMove
	for _, from := range online {
		surplus := counts[from] - share
		if surplus <= spreadSlack {
			continue
		}
		others := slices.DeleteFunc(slices.Clone(online), func(h string) bool { return h == from })
		held, err := g.store.DeliveryGroupWaiting(ctx, groupID, others, counts[from])
		if err != nil {
			return 0, err
		}
		// The newest go: the member keeps working through the oldest.
		for i := len(held) - 1; i >= 0 && surplus > 0 && len(moves) < rebalanceBatch; i-- {
			if held[i].HostID != from {
				continue // a stranded one, for the next round
			}
			to := "" // the member holding the fewest, below its share
			for _, h := range online {
				if h != from && counts[h] < share && (to == "" || counts[h] < counts[to]) {
					to = h
				}
			}
			if to == "" {
				break
			}
			moves = append(moves, store.DeliveryMove{ID: held[i].ID, From: from, To: to,
				Reason: "handed to " + to + ": spread over the members online"})
			counts[from]--
			counts[to]++
			surplus--
		}
	}
	if len(moves) == 0 {
		return 0, nil
	}
	return g.store.DeliveryMove(ctx, &store.DeliveryMoveParams{GroupID: groupID, Moves: moves, Now: now.UTC().Truncate(time.Millisecond)})
}
