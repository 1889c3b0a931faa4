package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/flow"
)

// --- hosts ---

const hostColumns = `id, name, status, generation, credential_hash, claim_code_hash, claim_expires_at,
	claimed_at, agent_version, last_heartbeat_at, subscription, rate_limit_per_min, rate_limit_burst,
	created_at, deactivated_at`

func scanHost(row scanner) (*store.Host, error) {
	var h store.Host
	var sub sql.NullString
	err := row.Scan(&h.ID, &h.Name, &h.Status, &h.Generation, &h.CredentialHash, &h.ClaimCodeHash,
		nullTimeCol{&h.ClaimExpiresAt}, nullTimeCol{&h.ClaimedAt}, &h.AgentVersion, nullTimeCol{&h.LastHeartbeatAt},
		&sub, &h.RateLimitPerMin, &h.RateLimitBurst, timeCol{&h.CreatedAt}, nullTimeCol{&h.DeactivatedAt})
	if err != nil {
		return nil, err
	}
	if sub.Valid {
		h.Subscription = json.RawMessage(sub.String)
	}
	return &h, nil
}

func (s *Store) HostCreate(ctx context.Context, p *store.HostCreateParams) (*store.Host, error) {
	h, err := scanHost(s.write.QueryRowContext(ctx, `
		INSERT INTO hosts (id, name, claim_code_hash, claim_expires_at, rate_limit_per_min, rate_limit_burst, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)
		RETURNING `+hostColumns,
		p.ID, p.Name, p.ClaimCodeHash, dbTime(p.ClaimExpiresAt), p.RateLimitPerMin, p.RateLimitBurst, dbTime(p.Now)))
	if err != nil {
		return nil, fmt.Errorf("host create: %w", interpretError(err))
	}
	s.changed.notify(p.ID)
	return h, nil
}

func (s *Store) HostGet(ctx context.Context, id string) (*store.Host, error) {
	h, err := scanHost(s.read.QueryRowContext(ctx, `SELECT `+hostColumns+` FROM hosts WHERE id = ?`, id))
	if err != nil {
		return nil, fmt.Errorf("host get: %w", interpretError(err))
	}
	return h, nil
}

func (s *Store) HostList(ctx context.Context) ([]*store.Host, error) {
	hosts, err := queryAll(ctx, s.read, scanHost, `SELECT `+hostColumns+` FROM hosts ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("host list: %w", err)
	}
	return hosts, nil
}

func (s *Store) HostClaim(ctx context.Context, p *store.HostClaimParams) (*store.Host, error) {
	now := dbTime(p.Now)
	h, err := scanHost(s.write.QueryRowContext(ctx, `
		UPDATE hosts
		SET credential_hash = ?, agent_version = ?, claimed_at = ?,
			claim_code_hash = NULL, claim_expires_at = NULL, generation = generation + 1
		WHERE claim_code_hash = ? AND status = 'active' AND claim_expires_at > ?
		RETURNING `+hostColumns,
		p.CredentialHash, p.AgentVersion, now, p.ClaimCodeHash, now))
	if err != nil {
		return nil, fmt.Errorf("host claim: %w", interpretError(err))
	}
	return h, nil
}

func (s *Store) HostSetClaimCode(ctx context.Context, p *store.HostSetClaimCodeParams) (*store.Host, error) {
	h, err := scanHost(s.write.QueryRowContext(ctx, `
		UPDATE hosts SET claim_code_hash = ?, claim_expires_at = ?
		WHERE id = ? AND status = 'active'
		RETURNING `+hostColumns,
		p.ClaimCodeHash, dbTime(p.ClaimExpiresAt), p.HostID))
	if err != nil {
		return nil, fmt.Errorf("host set claim code: %w", interpretError(err))
	}
	return h, nil
}

func (s *Store) HostHeartbeat(ctx context.Context, p *store.HostHeartbeatParams) error {
	var sub any // nil keeps the stored subscription
	if p.Subscription != nil {
		sub = string(p.Subscription)
	}
	res, err := s.write.ExecContext(ctx, `
		UPDATE hosts SET last_heartbeat_at = ?, agent_version = ?, subscription = COALESCE(?, subscription)
		WHERE id = ?`,
		dbTime(p.Now), p.AgentVersion, sub, p.HostID)
	if err != nil {
		return fmt.Errorf("host heartbeat: %w", interpretError(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("host heartbeat: %w", err)
	} else if n == 0 {
		return fmt.Errorf("host heartbeat: %w", store.ErrNotFound)
	}
	if p.Subscription != nil {
		s.changed.notify(p.HostID)
	}
	return nil
}

func (s *Store) HostDeactivate(ctx context.Context, p *store.HostDeactivateParams) (*store.Host, error) {
	h, err := scanHost(s.write.QueryRowContext(ctx, `
		UPDATE hosts
		SET status = 'deactivated', deactivated_at = COALESCE(deactivated_at, ?),
			claim_code_hash = NULL, claim_expires_at = NULL, generation = generation + 1
		WHERE id = ?
		RETURNING `+hostColumns,
		dbTime(p.Now), p.HostID))
	if err != nil {
		return nil, fmt.Errorf("host deactivate: %w", interpretError(err))
	}
	s.changed.notify(p.HostID)
	return h, nil
}

func (s *Store) HostListWithCounts(ctx context.Context, p *store.HostPageParams) ([]*store.HostWithCounts, error) {
	return flow.HostsWithCounts(ctx, s.db(), hostColumns, scanHost, p)
}

func (s *Store) HostUpdate(ctx context.Context, p *store.HostUpdateParams) (*store.Host, error) {
	h, err := scanHost(s.write.QueryRowContext(ctx, `
		UPDATE hosts
		SET name = COALESCE(?, name), rate_limit_per_min = COALESCE(?, rate_limit_per_min),
			rate_limit_burst = COALESCE(?, rate_limit_burst)
		WHERE id = ?
		RETURNING `+hostColumns,
		p.Name, p.RateLimitPerMin, p.RateLimitBurst, p.HostID))
	if err != nil {
		return nil, fmt.Errorf("host update: %w", interpretError(err))
	}
	s.changed.notify(p.HostID)
	return h, nil
}
