package server

import (
	"context"

	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/intake"
	"github.com/relaykit/relay/cloud/store"
)

// Store is what the server needs of the store (a store.Store has it): what
// it hands to the delivery core, the sockets and intake, and the reads and
// writes of the admin API (what `cloud ctl` calls). Each method is
// store.Store's, with its errors.
type Store interface {
	delivery.Store
	delivery.SocketStore
	delivery.GroupStore
	delivery.RollCallStore
	intake.Store

	AlertList(ctx context.Context, p *store.AlertListParams) ([]*store.Alert, error)
	AlertRuleDelete(ctx context.Context, hostID, rule string) error
	AlertRuleList(ctx context.Context) ([]*store.AlertRuleSetting, error)
	AlertRuleSet(ctx context.Context, r *store.AlertRuleSetting) error
	AlertSinkList(ctx context.Context) ([]*store.AlertSink, error)
	AlertSinkCreate(ctx context.Context, s *store.AlertSink) error
	AlertSinkDelete(ctx context.Context, id string) error
	Close() error
	DeliveryCountByStatus(ctx context.Context, hostID string) (map[store.Status]int, error)
	DeliveryEventList(ctx context.Context, deliveryID string) ([]*store.DeliveryEvent, error)
	DeliveryEventListAfter(ctx context.Context, p *store.DeliveryEventListAfterParams) ([]*store.DeliveryEventOf, error)
	DeliveryFind(ctx context.Context, p *store.DeliveryFindParams) ([]*store.Delivery, error)
	DeliveryGet(ctx context.Context, hostID, id string) (*store.Delivery, error)
	DeliveryList(ctx context.Context, p *store.DeliveryListParams) ([]*store.Delivery, error)
	DeliveryPurgeDLQ(ctx context.Context, p *store.DeliveryPurgeDLQParams) (int, error)
	DeliveryResultGet(ctx context.Context, deliveryID string) (*store.DeliveryResult, error)
	DeliveryRetry(ctx context.Context, p *store.DeliveryRetryParams) (*store.Delivery, error)
	GroupCreate(ctx context.Context, p *store.GroupCreateParams) (*store.Group, error)
	GroupDeactivate(ctx context.Context, p *store.GroupDeactivateParams) (*store.Group, error)
	GroupGet(ctx context.Context, id string) (*store.Group, error)
	GroupList(ctx context.Context) ([]*store.Group, error)
	GroupsOfHost(ctx context.Context, hostID string) ([]store.GroupMemberOf, error)
	GroupMemberAdd(ctx context.Context, p *store.GroupMemberParams) (*store.Group, error)
	GroupMemberRemove(ctx context.Context, p *store.GroupMemberParams) (*store.GroupMemberRemoved, error)
	GroupUpdate(ctx context.Context, p *store.GroupUpdateParams) (*store.Group, error)
	HostClaim(ctx context.Context, p *store.HostClaimParams) (*store.Host, error)
	HostCreate(ctx context.Context, p *store.HostCreateParams) (*store.Host, error)
	HostDeactivate(ctx context.Context, p *store.HostDeactivateParams) (*store.Host, error)
	HostList(ctx context.Context) ([]*store.Host, error)
	HostListWithCounts(ctx context.Context, p *store.HostPageParams) ([]*store.HostWithCounts, error)
	HostSetClaimCode(ctx context.Context, p *store.HostSetClaimCodeParams) (*store.Host, error)
	HostUpdate(ctx context.Context, p *store.HostUpdateParams) (*store.Host, error)
	Ping(ctx context.Context) error
	PresenceEventList(ctx context.Context, hostID string, limit int) ([]*store.PresenceEvent, error)
	QuarantineCount(ctx context.Context) (int, error)
	RejectionList(ctx context.Context, p *store.RejectionListParams) ([]*store.Rejection, error)
	SessionDeleteAll(ctx context.Context) (int, error)
	SourceList(ctx context.Context, hostID string) ([]*store.Source, error)
	SourceUpsert(ctx context.Context, p *store.SourceUpsertParams) (*store.Source, error)
}
