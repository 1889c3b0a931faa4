package console

import (
	"context"
	"time"

	"github.com/relaykit/relay/cloud/store"
)

// Store is what the console reads (and its sessions write) of the store
// (a store.Store has it). Each method is store.Store's, with its errors.
type Store interface {
	AlertList(ctx context.Context, p *store.AlertListParams) ([]*store.Alert, error)
	BacklogByHost(ctx context.Context, p *store.BacklogParams) ([]*store.HostBacklog, error)
	DeliveryCountByStatus(ctx context.Context, hostID string) (map[store.Status]int, error)
	DeliveryEventList(ctx context.Context, deliveryID string) ([]*store.DeliveryEvent, error)
	DeliveryFind(ctx context.Context, p *store.DeliveryFindParams) ([]*store.Delivery, error)
	DeliveryGet(ctx context.Context, hostID, id string) (*store.Delivery, error)
	DeliveryResultGet(ctx context.Context, deliveryID string) (*store.DeliveryResult, error)
	DeliveryVolume(ctx context.Context, p *store.DeliveryVolumeParams) ([]store.VolumeHour, error)
	GroupGet(ctx context.Context, id string) (*store.Group, error)
	GroupList(ctx context.Context) ([]*store.Group, error)
	GroupsOfHost(ctx context.Context, hostID string) ([]store.GroupMemberOf, error)
	HostGet(ctx context.Context, id string) (*store.Host, error)
	HostList(ctx context.Context) ([]*store.Host, error)
	HostListWithCounts(ctx context.Context, p *store.HostPageParams) ([]*store.HostWithCounts, error)
	PresenceEventList(ctx context.Context, hostID string, limit int) ([]*store.PresenceEvent, error)
	QuarantineCount(ctx context.Context) (int, error)
	QuarantineList(ctx context.Context, p *store.QuarantineListParams) ([]*store.QuarantinedRequest, error)
	RejectionList(ctx context.Context, p *store.RejectionListParams) ([]*store.Rejection, error)
	SessionCreate(ctx context.Context, p *store.SessionCreateParams) (*store.Session, error)
	SessionDelete(ctx context.Context, idHash []byte) error
	SessionGet(ctx context.Context, idHash []byte) (*store.Session, error)
	SessionTouch(ctx context.Context, idHash []byte, now time.Time) error
	SourceGet(ctx context.Context, hostID, name string) (*store.Source, error)
	SourceList(ctx context.Context, hostID string) ([]*store.Source, error)
}
