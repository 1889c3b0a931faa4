package flow

// Shared is what flow implements of store.Store, for an engine's Store to
// embed: presence and alerting (Alerts); a host's counts, next retry,
// digest lookups and volume (Deliveries); rejections, the quarantine's reads and
// settings (Edge); console logins (Sessions); sets of sender addresses
// (IPSets); reads of sources (Sources); batched purges, pruning and
// claim-code expiry (Upkeep).
type Shared struct {
	Alerts
	Deliveries
	Edge
	Groups
	Sessions
	IPSets
	Sources
	Upkeep
}

// NewShared is Shared on db.
func NewShared(db DB) Shared {
	return Shared{Alerts: Alerts{db}, Deliveries: Deliveries{db}, Edge: Edge{db}, Groups: Groups{db}, Sessions: Sessions{db}, IPSets: IPSets{db}, Sources: Sources{db}, Upkeep: Upkeep{db}}
}
