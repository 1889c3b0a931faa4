package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// ErrQuarantineFull: the quarantine holds as many requests (or bytes) as it
// may.
var ErrQuarantineFull = errors.New("quarantine full")

// ErrQuarantineHostFull: the host's share of the quarantine is used up; the
// rest of the quarantine may have room for other hosts. It wraps
// ErrQuarantineFull.
var ErrQuarantineHostFull = fmt.Errorf("%w: the host's share is used up", ErrQuarantineFull)

// EdgeStore is what the public intake edge keeps besides deliveries: the
// rejections audit, the quarantine of requests whose source secret could not
// be decrypted, small settings (the secrets canary), and the source secrets
// themselves for re-encryption.
type EdgeStore interface {
	// RejectionInsert records one refused intake request, cut to the
	// rejection bounds (Rejection.Bounded).
	RejectionInsert(ctx context.Context, r *Rejection) error
	// RejectionList returns a host's rejections, newest first, before the
	// cursor id if one is given.
	RejectionList(ctx context.Context, p *RejectionListParams) ([]*Rejection, error)
	// RejectionPrune deletes rejections recorded before p.Before, at most
	// p.Limit of them (0: 1000). Returns how many.
	RejectionPrune(ctx context.Context, p *PruneParams) (int, error)

	// QuarantineInsert keeps a raw request whose secret could not be
	// decrypted. ErrQuarantineFull when MaxRows are already held, or when the
	// bytes held and this request's would pass MaxBytes;
	// ErrQuarantineHostFull when the same holds of the host's own requests
	// and HostMaxRows or HostMaxBytes. A request's bytes are those of its
	// body, headers (as JSON) and URL.
	QuarantineInsert(ctx context.Context, p *QuarantineInsertParams) (*QuarantinedRequest, error)
	// QuarantineList returns quarantined requests with their bodies, oldest
	// first, with ids after AfterID.
	QuarantineList(ctx context.Context, p *QuarantineListParams) ([]*QuarantinedRequest, error)
	// QuarantineGet returns one quarantined request with its body, or
	// ErrNotFound.
	QuarantineGet(ctx context.Context, id int64) (*QuarantinedRequest, error)
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

// The bounds of a rejection record. Everything in it but the host and the
// source (both configured) comes from the sender, who can send 1 MiB of
// header names: a record keeps at most RejectionMaxHeaderNames names of at
// most RejectionMaxNameBytes each, then one entry saying how many more there
// were, so that it stays under 5 KB whatever was sent.
const (
	RejectionMaxHeaderNames = 64
	RejectionMaxNameBytes   = 64
	RejectionMaxReasonBytes = 500
	RejectionMaxIPBytes     = 64
)

// Bounded is r cut to the rejection bounds: header names past the first
// RejectionMaxHeaderNames are replaced by one entry "(N more)" (never a
// header name: parentheses are not allowed in one), a longer name is cut and
// ends in "…", and the reason and client IP are cut at a character
// boundary.
func (r Rejection) Bounded() Rejection {
	r.Reason = cutUTF8(r.Reason, RejectionMaxReasonBytes)
	r.ClientIP = cutUTF8(r.ClientIP, RejectionMaxIPBytes)
	r.HeaderNames = CutHeaderNames(r.HeaderNames)
	return r
}

// CutHeaderNames is names cut to the rejection bounds (see Bounded); names
// is not changed.
func CutHeaderNames(names []string) []string {
	n := min(len(names), RejectionMaxHeaderNames)
	out := make([]string, 0, n+1)
	for _, name := range names[:n] {
		if len(name) > RejectionMaxNameBytes {
			name = cutUTF8(name, RejectionMaxNameBytes-len("…")) + "…"
		}
		out = append(out, name)
	}
	if more := len(names) - n; more > 0 {
		out = append(out, "("+strconv.Itoa(more)+" more)")
	}
	return out
}

// cutUTF8 is s cut to at most n bytes, not inside a character.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
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

// The kinds of quarantined request.
const (
	// QuarantineSecret waits for a key that decrypts its source's secret,
	// and is released by the release passes.
	QuarantineSecret = "secret"
	// QuarantineReplay was verified and held as a suspected replay: its
	// body is that of a delivery stored under another event id. Only an
	// operator releases it, one by one.
	QuarantineReplay = "replay"
)

// QuarantinedRequest is a raw intake request kept until a key that decrypts
// its source's secret is configured (Kind QuarantineSecret), or held as a
// suspected replay until an operator releases it (QuarantineReplay). The headers that carried the source's
// secret itself (token schemes) are not kept: TokenMACs holds an
// HMAC-SHA256 of each under a server key instead, enough to check the token
// once the secret opens again.
type QuarantinedRequest struct {
	ID         int64
	HostID     string
	Source     string
	URL        string              // the public URL it was posted to
	Header     map[string][]string // every header as received, but those carrying the secret itself
	TokenMACs  map[string][]byte   // by header name, keyed hashes of those that did (see below)
	Body       []byte
	ClientIP   string
	ReceivedAt time.Time
	Kind       string // QuarantineSecret ("" on insert) or QuarantineReplay
	Reason     string // why it is held, for operators
}

type QuarantineInsertParams struct {
	QuarantinedRequest
	MaxRows      int   // 0: no bound
	MaxBytes     int64 // bytes in all, this request's included; 0: no bound
	HostMaxRows  int   // the host's share of MaxRows; 0: no bound
	HostMaxBytes int64 // the host's share of MaxBytes; 0: no bound
}

type QuarantineListParams struct {
	AfterID int64
	Limit   int
	Kind    string // "": every kind
}

// KindOr is the kind a quarantined request is stored with: kind, or
// QuarantineSecret when empty.
func KindOr(kind string) string {
	if kind == "" {
		return QuarantineSecret
	}
	return kind
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

// QuarantineHeld is what the quarantine holds, in all and of one host.
type QuarantineHeld struct {
	Rows      int
	Bytes     int64
	HostRows  int
	HostBytes int64
}

// Room says whether a request of size bytes fits beside what is held: nil,
// ErrQuarantineFull or ErrQuarantineHostFull. Every engine decides by it.
func (p *QuarantineInsertParams) Room(held QuarantineHeld, size int64) error {
	over := func(rows, maxRows int, bytes, maxBytes int64) bool {
		return (maxRows > 0 && rows >= maxRows) || (maxBytes > 0 && bytes+size > maxBytes)
	}
	switch {
	case over(held.Rows, p.MaxRows, held.Bytes, p.MaxBytes):
		return ErrQuarantineFull
	case over(held.HostRows, p.HostMaxRows, held.HostBytes, p.HostMaxBytes):
		return ErrQuarantineHostFull
	}
	return nil
}

// QuarantineSize is what a quarantined request counts against the byte
// bounds: its body, its headers as stored (JSON) and its URL.
func QuarantineSize(body, headersJSON []byte, url string) int64 {
	return int64(len(body) + len(headersJSON) + len(url))
}
