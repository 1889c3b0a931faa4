package flow

import (
	"context"
	"fmt"
	"strings"

	"github.com/relaykit/relay/cloud/store"
)

// Groups implements, on DB, store.GroupStore's groups and members, and the
// reads and moves of the deliveries an any group's members hold. Handing a
// delivery over wakes its new holder: the engine does that once the move
// committed (Moved).
type Groups struct{ DB DB }

const groupColumns = `id, name, status, rate_limit_per_min, rate_limit_burst, created_at, deactivated_at`

func (c TimeColumns) scanGroup(row Scanner) (*store.Group, error) {
	var g store.Group
	if err := row.Scan(&g.ID, &g.Name, &g.Status, &g.RateLimitPerMin, &g.RateLimitBurst, c.Time(&g.CreatedAt),
		c.NullTime(&g.DeactivatedAt)); err != nil {
		return nil, err
	}
	return &g, nil
}

type memberRow struct {
	groupID string
	m       store.GroupMember
}

// members reads the members of group id (of every group when id is ""),
// by group, in order.
func (g Groups) members(ctx context.Context, q Executor, id string) (map[string][]store.GroupMember, error) {
	where, args := "", []any{}
	if id != "" {
		where, args = "WHERE m.group_id = $1", []any{id}
	}
	times := g.DB.Times()
	rows, err := All(ctx, q, func(r Scanner) (memberRow, error) {
		var x memberRow
		err := r.Scan(&x.groupID, &x.m.HostID, &x.m.Position, times.Time(&x.m.AddedAt), &x.m.HostStatus)
		return x, err
	}, `SELECT m.group_id, m.host_id, m.position, m.added_at, h.status
		FROM group_members m JOIN hosts h ON h.id = m.host_id `+where+`
		ORDER BY m.group_id, m.position, m.added_at, m.host_id`, args...)
	if err != nil {
		return nil, err
	}
	out := map[string][]store.GroupMember{}
	for _, x := range rows {
		out[x.groupID] = append(out[x.groupID], x.m)
	}
	return out, nil
}

// get reads one group and its members on q.
func (g Groups) get(ctx context.Context, q Executor, id string) (*store.Group, error) {
	grp, err := g.DB.Times().scanGroup(q.QueryRow(ctx, `SELECT `+groupColumns+` FROM host_groups WHERE id = $1`, id))
	if err != nil {
		return nil, notFound(err)
	}
	ms, err := g.members(ctx, q, id)
	if err != nil {
		return nil, err
	}
	grp.Members = ms[id]
	return grp, nil
}

func (g Groups) GroupCreate(ctx context.Context, p *store.GroupCreateParams) (*store.Group, error) {
	_, err := g.DB.Write().Exec(ctx, `
		INSERT INTO host_groups (id, name, status, rate_limit_per_min, rate_limit_burst, created_at)
		VALUES ($1, $2, 'active', $3, $4, $5)`,
		p.ID, p.Name, max(p.RateLimitPerMin, 0), max(p.RateLimitBurst, 0), g.DB.Time(p.Now))
	if err != nil {
		return nil, fmt.Errorf("group create: %w", err)
	}
	return g.GroupGet(ctx, p.ID)
}

func (g Groups) GroupGet(ctx context.Context, id string) (*store.Group, error) {
	grp, err := g.get(ctx, g.DB.Read(), id)
	if err != nil {
		return nil, fmt.Errorf("group get: %w", err)
	}
	return grp, nil
}

func (g Groups) GroupList(ctx context.Context) ([]*store.Group, error) {
	q := g.DB.Read()
	groups, err := All(ctx, q, g.DB.Times().scanGroup, `SELECT `+groupColumns+` FROM host_groups ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("group list: %w", err)
	}
	ms, err := g.members(ctx, q, "")
	if err != nil {
		return nil, fmt.Errorf("group list: %w", err)
	}
	for _, grp := range groups {
		grp.Members = ms[grp.ID]
	}
	return groups, nil
}

func (g Groups) GroupUpdate(ctx context.Context, p *store.GroupUpdateParams) (*store.Group, error) {
	n, err := g.DB.Write().Exec(ctx, `
		UPDATE host_groups SET name = COALESCE($2, name), rate_limit_per_min = COALESCE($3, rate_limit_per_min),
			rate_limit_burst = COALESCE($4, rate_limit_burst)
		WHERE id = $1`, p.GroupID, p.Name, p.RateLimitPerMin, p.RateLimitBurst)
	if err == nil && n == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("group update: %w", err)
	}
	return g.GroupGet(ctx, p.GroupID)
}

func (g Groups) GroupDeactivate(ctx context.Context, p *store.GroupDeactivateParams) (*store.Group, error) {
	n, err := g.DB.Write().Exec(ctx, `
		UPDATE host_groups SET status = 'deactivated', deactivated_at = COALESCE(deactivated_at, $2) WHERE id = $1`,
		p.GroupID, g.DB.Time(p.Now))
	if err == nil && n == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("group deactivate: %w", err)
	}
	return g.GroupGet(ctx, p.GroupID)
}

func (g Groups) GroupMemberAdd(ctx context.Context, p *store.GroupMemberParams) (*store.Group, error) {
	var grp *store.Group
	err := g.DB.InTx(ctx, func(tx Executor) error {
		var one int
		if err := tx.QueryRow(ctx, `
			SELECT 1 FROM host_groups WHERE id = $1 AND status = 'active'
				AND EXISTS (SELECT 1 FROM hosts WHERE id = $2 AND status = 'active')`+g.DB.ForUpdate(),
			p.GroupID, p.HostID).Scan(&one); err != nil {
			return notFound(err)
		}
		pos := p.Position
		if pos <= 0 {
			if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(position), 0) + 1 FROM group_members WHERE group_id = $1`,
				p.GroupID).Scan(&pos); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO group_members (group_id, host_id, position, added_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (group_id, host_id) DO NOTHING`, p.GroupID, p.HostID, pos, g.DB.Time(p.Now)); err != nil {
			return err
		}
		var err error
		grp, err = g.get(ctx, tx, p.GroupID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("group member add: %w", err)
	}
	return grp, nil
}

// CancelledReason is the audit reason, and last error, of a fanout
// delivery cancelled because its member left the group.
const CancelledReason = "cancelled: the host left the group"

func (g Groups) GroupMemberRemove(ctx context.Context, p *store.GroupMemberParams) (*store.GroupMemberRemoved, error) {
	out := &store.GroupMemberRemoved{}
	now := g.DB.Time(p.Now)
	err := g.DB.InTx(ctx, func(tx Executor) error {
		n, err := tx.Exec(ctx, `DELETE FROM group_members WHERE group_id = $1 AND host_id = $2`, p.GroupID, p.HostID)
		if err != nil {
			return err
		}
		if n == 0 {
			return store.ErrNotFound
		}
		// Its fanout deliveries not finished are cancelled: dead-lettered
		// with why, so that an operator sees them and can send them on.
		// One in flight may still be acked by the host: an ack of a
		// dead-lettered delivery is a no-op.
		open := []any{string(store.StatusQueued), string(store.StatusRetrying), string(store.StatusDelivering), string(store.StatusDelivered)}
		if _, err := tx.Exec(ctx, `
			INSERT INTO delivery_events (delivery_id, at, from_status, to_status, reason, attempt, host_id, source)
			SELECT delivery_id, $1, status, $2, $3, attempts, host_id, source FROM deliveries
			WHERE host_id = $4 AND group_id = $5 AND lane = $4 AND status IN ($6, $7, $8, $9)
			ORDER BY delivery_id`,
			append([]any{now, string(store.StatusDLQ), CancelledReason, p.HostID, p.GroupID}, open...)...); err != nil {
			return err
		}
		cancelled, err := tx.Exec(ctx, `
			UPDATE deliveries SET status = $1, dlq_at = $2, updated_at = $2, next_retry_at = NULL,
				lease_expires_at = NULL, last_error = $3
			WHERE host_id = $4 AND group_id = $5 AND lane = $4 AND status IN ($6, $7, $8, $9)`,
			append([]any{string(store.StatusDLQ), now, CancelledReason, p.HostID, p.GroupID}, open...)...)
		if err != nil {
			return err
		}
		out.Cancelled = int(cancelled)
		out.Group, err = g.get(ctx, tx, p.GroupID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("group member remove: %w", err)
	}
	return out, nil
}

func (g Groups) GroupsOfHost(ctx context.Context, hostID string) ([]store.GroupMemberOf, error) {
	out, err := All(ctx, g.DB.Read(), func(r Scanner) (store.GroupMemberOf, error) {
		var x store.GroupMemberOf
		err := r.Scan(&x.GroupID, &x.Name)
		return x, err
	}, `SELECT g.id, g.name FROM group_members m JOIN host_groups g ON g.id = m.group_id WHERE m.host_id = $1 ORDER BY g.id`, hostID)
	if err != nil {
		return nil, fmt.Errorf("groups of host: %w", err)
	}
	return out, nil
}

func (g Groups) GroupRosters(ctx context.Context) ([]*store.GroupRoster, error) {
	times := g.DB.Times()
	type row struct {
		groupID string
		status  store.HostStatus
		m       store.RosterMember
	}
	rows, err := All(ctx, g.DB.Read(), func(r Scanner) (row, error) {
		var x row
		err := r.Scan(&x.groupID, &x.status, &x.m.HostID, &x.m.Status, times.NullTime(&x.m.LastHeartbeatAt))
		return x, err
	}, `
		SELECT m.group_id, g.status, m.host_id, h.status, h.last_heartbeat_at
		FROM host_groups g
		JOIN group_members m ON m.group_id = g.id
		JOIN hosts h ON h.id = m.host_id
		WHERE EXISTS (SELECT 1 FROM sources s WHERE s.host_id = g.id AND s.mode = 'any')
			AND (g.status = 'active' OR EXISTS (SELECT 1 FROM deliveries d
				WHERE d.group_id = g.id AND d.lane = '' AND d.status IN ('queued', 'retrying')))
		ORDER BY m.group_id, m.position, m.added_at, m.host_id`)
	if err != nil {
		return nil, fmt.Errorf("group rosters: %w", err)
	}
	var out []*store.GroupRoster
	for _, x := range rows {
		if len(out) == 0 || out[len(out)-1].GroupID != x.groupID {
			out = append(out, &store.GroupRoster{GroupID: x.groupID, Status: x.status})
		}
		r := out[len(out)-1]
		r.Members = append(r.Members, x.m)
	}
	return out, nil
}

func (g Groups) DeliveryGroupWaiting(ctx context.Context, groupID string, except []string, limit int) ([]store.Waiting, error) {
	args := []any{groupID}
	notIn := ""
	if len(except) > 0 {
		notIn = " AND host_id NOT IN ("
		for i, h := range except {
			if i > 0 {
				notIn += ", "
			}
			args = append(args, h)
			notIn += fmt.Sprintf("$%d", len(args))
		}
		notIn += ")"
	}
	args = append(args, store.LimitOr(limit, DefaultBatch))
	out, err := All(ctx, g.DB.Read(), func(r Scanner) (store.Waiting, error) {
		var w store.Waiting
		err := r.Scan(&w.ID, &w.HostID)
		return w, err
	}, `
		SELECT delivery_id, host_id FROM deliveries
		WHERE group_id = $1`+notIn+` AND group_id <> '' AND lane = '' AND status IN ('queued', 'retrying')
		ORDER BY received_at, delivery_id
		LIMIT $`+fmt.Sprint(len(args)), args...)
	if err != nil {
		return nil, fmt.Errorf("group waiting: %w", err)
	}
	return out, nil
}

func (g Groups) DeliveryGroupHolders(ctx context.Context, groupID string) (map[string]int, error) {
	counts, err := All(ctx, g.DB.Read(), ScanCount[string], `
		SELECT host_id, count(*) FROM deliveries
		WHERE group_id = $1 AND group_id <> '' AND lane = '' AND status IN ('queued', 'retrying')
		GROUP BY host_id`, groupID)
	if err != nil {
		return nil, fmt.Errorf("group holders: %w", err)
	}
	return AddCounts(map[string]int{}, counts), nil
}

// Move hands each waiting any delivery of p to its new holder, if its
// holder is still From and it still waits, with an audit event; it returns
// how many moved and the hosts that now hold one (to be woken once
// committed). The moves of one holder to another with one reason are two
// statements (the events, the update), whatever their number: a group's
// waiting deliveries of one holder are found by their partial index.
func (g Groups) Move(ctx context.Context, p *store.DeliveryMoveParams) (int, []string, error) {
	type pair struct{ from, to, reason string }
	var order []pair
	ids := map[pair][]any{}
	for _, mv := range p.Moves {
		k := pair{mv.From, mv.To, mv.Reason}
		if _, ok := ids[k]; !ok {
			order = append(order, k)
		}
		ids[k] = append(ids[k], mv.ID)
	}
	now := g.DB.Time(p.Now)
	moved := 0
	var hosts []string
	err := g.DB.InTx(ctx, func(tx Executor) error {
		moved, hosts = 0, nil
		woken := map[string]bool{}
		for _, k := range order {
			in := make([]string, len(ids[k]))
			for i := range in {
				in[i] = fmt.Sprintf("$%d", i+5)
			}
			// $3 the group, $4 the holder, $5… the ids.
			held := `group_id = $3 AND group_id <> '' AND host_id = $4 AND lane = '' AND status IN ('queued', 'retrying')
				AND delivery_id IN (` + strings.Join(in, ", ") + `)`
			// The events name the member the deliveries move to: the
			// host that holds each once its event is recorded.
			to := fmt.Sprintf("$%d", len(in)+5)
			if _, err := tx.Exec(ctx, `
				INSERT INTO delivery_events (delivery_id, at, from_status, to_status, reason, attempt, host_id, source)
				SELECT delivery_id, $1, status, status, $2, attempts, `+to+`, source FROM deliveries WHERE `+held+`
				ORDER BY delivery_id`,
				append(append([]any{now, k.reason, p.GroupID, k.from}, ids[k]...), k.to)...); err != nil {
				return err
			}
			n, err := tx.Exec(ctx, `UPDATE deliveries SET updated_at = $1, host_id = $2 WHERE `+held,
				append([]any{now, k.to, p.GroupID, k.from}, ids[k]...)...)
			if err != nil {
				return err
			}
			if n > 0 {
				moved += int(n)
				if !woken[k.to] {
					woken[k.to] = true
					hosts = append(hosts, k.to)
				}
			}
		}
		return nil
	})
	if err != nil {
		return 0, nil, fmt.Errorf("delivery move: %w", err)
	}
	return moved, hosts, nil
}
