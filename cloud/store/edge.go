package store

import (
	"context"
	"errors"
	"time"
)

// ErrQuarantineFull: the quarantine holds as many requests as it may.
var ErrQuarantineFull = errors.New("quarantine full")

// EdgeStore is what the public intake edge keeps besides deliveries: the
// rejections audit, the quarantine of requests whose source secret could not
// be decrypted, small settings (the secrets canary), and the source secrets
// themselves for re-encryption.
type EdgeStore interface {
	// RejectionInsert records one refused intake request.
	RejectionInsert(ctx context.Context, r *Rejection) error
	// RejectionList returns a host's rejections, newest first, before the
	// cursor id if one is given.
	RejectionList(ctx context.Context, p *RejectionListParams) ([]*Rejection, error)
	// RejectionPrune deletes rejections recorded before p.Before, at most
	// p.Limit of them (0: 1000). Returns how many.
	RejectionPrune(ctx context.Context, p *PruneParams) (int, error)

	// QuarantineInsert keeps a raw request whose secret could not be
	// decrypted. ErrQuarantineFull when MaxRows are already held, or when the
	// bodies held and this one would pass MaxBytes.
	QuarantineInsert(ctx context.Context, p *QuarantineInsertParams) (*QuarantinedRequest, error)
	// QuarantineList returns quarantined requests with their bodies, oldest
	// first, with ids after AfterID.
	QuarantineList(ctx context.Context, p *QuarantineListParams) ([]*QuarantinedRequest, error)
	// QuarantineDelete removes one quarantined request (a no-op if gone).
	QuarantineDelete(ctx context.Context, id int64) error
	// QuarantineCount says how many requests are quarantined.
	QuarantineCount(ctx context.Context) (int, error)

	// MetaGet returns a setting, or ErrNotFound.
	MetaGet(ctx context.Context, key string) (string, error)
	// MetaPut creates or replaces a setting.
	MetaPut(ctx context.Context, key, value string) error

	// SourceListAll returns every source of every host, ordered by host and
	// name.
	SourceListAll(ctx context.Context) ([]*Source, error)
	// SourceSetSecrets replaces a source's sealed secrets if the source was
	// not changed since p.UpdatedAt; ErrConflict if it was, ErrNotFound if it
	// is gone.
	SourceSetSecrets(ctx context.Context, p *SourceSetSecretsParams) error
}

// Rejection is one refused intake request: no body and no header values,
// which may carry secrets.
type Rejection struct {
	ID          int64
	HostID      string
	Source      string
	At          time.Time
	Status      int    // the HTTP status answered: 401, 413 or 429
	Reason      string // what failed, e.g. "signature: no secret matches the signature"
	ClientIP    string
	HeaderNames []string // sorted, lower-case
}

type RejectionListParams struct {
	HostID   string
	Limit    int
	BeforeID int64 // 0: from the newest
}

// PruneParams bounds one pruning pass.
type PruneParams struct {
	Before time.Time
	Limit  int
}

// QuarantinedRequest is a raw intake request kept until a key that decrypts
// its source's secret is configured.
type QuarantinedRequest struct {
	ID         int64
	HostID     string
	Source     string
	URL        string              // the public URL it was posted to
	Header     map[string][]string // every header, as received
	Body       []byte
	ClientIP   string
	ReceivedAt time.Time
}

type QuarantineInsertParams struct {
	QuarantinedRequest
	MaxRows  int   // 0: no bound
	MaxBytes int64 // bodies in all, this one included; 0: no bound
}

type QuarantineListParams struct {
	AfterID int64
	Limit   int
}

type SourceSetSecretsParams struct {
	HostID    string
	Name      string
	Secrets   []SealedSecret
	UpdatedAt time.Time // the source's updated_at as read
	Now       time.Time
}

// OrEmpty is s, or an empty non-nil slice when s is nil (stored as [] and
// never as NULL).
func OrEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// LimitOr is n when positive, else def.
func LimitOr(n, def int) int {
	if n > 0 {
		return n
	}
	return def
}
