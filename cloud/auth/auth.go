// Package auth issues and checks the cloud's credentials: one-time claim
// codes, long-lived host credentials (stored only as hashes) and the
// short-lived JWTs hosts send with each heartbeat.
package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jonboulle/clockwork"

	"github.com/relaykit/relay/shared"
)

// Token lifetime and issuer.
const (
	DefaultTokenTTL = 15 * time.Minute
	issuer          = "relay-cloud"
	signingMethod   = "HS256"
)

// ErrInvalidToken is returned for every token that must not be accepted;
// callers answer 401 without saying which check failed.
var ErrInvalidToken = errors.New("invalid token")

// Claims are a host token's claims: sub is the host id, gen the host's
// generation when the token was issued.
type Claims struct {
	Generation int64 `json:"gen"`
	jwt.RegisteredClaims
}

// Tokens issues and verifies host JWTs with one fixed algorithm (HS256).
type Tokens struct {
	key    []byte
	ttl    time.Duration
	clock  clockwork.Clock
	parser *jwt.Parser
}

// NewTokens returns a token issuer. The key must be at least 32 bytes.
func NewTokens(key []byte, ttl time.Duration, clock clockwork.Clock) (*Tokens, error) {
	if len(key) < 32 {
		return nil, fmt.Errorf("jwt key: want at least 32 bytes, got %d", len(key))
	}
	if ttl <= 0 {
		ttl = DefaultTokenTTL
	}
	return &Tokens{
		key:   key,
		ttl:   ttl,
		clock: clock,
		parser: jwt.NewParser(
			jwt.WithValidMethods([]string{signingMethod}),
			jwt.WithAudience(shared.TokenAudience),
			jwt.WithIssuer(issuer),
			jwt.WithExpirationRequired(),
			jwt.WithIssuedAt(),
			jwt.WithLeeway(5*time.Second),
			jwt.WithTimeFunc(clock.Now),
		),
	}, nil
}

// Issue signs a token for a host at its current generation.
func (t *Tokens) Issue(hostID string, generation int64) (string, time.Time, error) {
	now := t.clock.Now()
	exp := now.Add(t.ttl)
	claims := Claims{
		Generation: generation,
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    issuer,
			Subject:   hostID,
			Audience:  jwt.ClaimStrings{shared.TokenAudience},
			IssuedAt:  jwt.NewNumericDate(now),
			NotBefore: jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(exp),
		},
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(t.key)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("sign token: %w", err)
	}
	return s, exp.Truncate(time.Second), nil
}

// Verify checks a token's signature, algorithm, audience, issuer and times,
// and returns its claims. Every failure is ErrInvalidToken (wrapping the
// cause for logs).
func (t *Tokens) Verify(token string) (*Claims, error) {
	var c Claims
	_, err := t.parser.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return t.key, nil })
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	if c.Subject == "" {
		return nil, fmt.Errorf("%w: no subject", ErrInvalidToken)
	}
	return &c, nil
}

// DerivedKey is a 32-byte key for another purpose than signing tokens,
// derived from the signing key (HMAC-SHA256 of purpose): every replica
// holds it, and it does not depend on the secret key ring.
func (t *Tokens) DerivedKey(purpose string) []byte {
	m := hmac.New(sha256.New, t.key)
	m.Write([]byte("relay derived key: " + purpose))
	return m.Sum(nil)
}

// Hash is the stored form of a claim code or host credential. Both are
// high-entropy random strings, so a plain SHA-256 is enough.
func Hash(secret string) []byte {
	sum := sha256.Sum256([]byte(secret))
	return sum[:]
}

// HashEqual compares two hashes in constant time.
func HashEqual(a, b []byte) bool {
	return len(a) == len(b) && subtle.ConstantTimeCompare(a, b) == 1
}

// BearerEqual compares a presented bearer token with the configured one in
// constant time (hashing first so lengths do not leak).
func BearerEqual(presented, want string) bool {
	return want != "" && HashEqual(Hash(presented), Hash(want))
}

// crockford is an unambiguous alphabet for codes people type.
var crockford = base32.NewEncoding("0123456789ABCDEFGHJKMNPQRSTVWXYZ").WithPadding(base32.NoPadding)

// NewClaimCode returns a one-time claim code such as "7KQ2-M9XD-4TRB-W1HZ"
// (80 random bits).
func NewClaimCode() string {
	s := crockford.EncodeToString(randomBytes(10))
	return s[0:4] + "-" + s[4:8] + "-" + s[8:12] + "-" + s[12:16]
}

// NormalizeClaimCode accepts a code typed in lower case or without dashes.
func NormalizeClaimCode(code string) string {
	code = strings.ToUpper(strings.TrimSpace(code))
	code = strings.ReplaceAll(code, "-", "")
	if len(code) != 16 {
		return code
	}
	return code[0:4] + "-" + code[4:8] + "-" + code[8:12] + "-" + code[12:16]
}

// NewCredential returns a host credential (256 random bits).
func NewCredential() string {
	return "hc_" + base64.RawURLEncoding.EncodeToString(randomBytes(32))
}

// NewHostID returns a host id: unguessable, since it appears in public
// webhook URLs.
func NewHostID() string { return newID("h_") }

// NewGroupID returns a group id: a host id's shape with its own prefix,
// so that the two never collide on the webhook URLs both appear in.
func NewGroupID() string { return newID("g_") }

func newID(prefix string) string {
	return prefix + strings.ToLower(crockford.EncodeToString(randomBytes(15)))
}

// hostIDLen is NewHostID's (and NewGroupID's) length: the prefix and 15
// bytes in base32.
const hostIDLen = 2 + 24

// ValidHostID reports whether id has NewHostID's form, so that a made-up
// id can be refused before anything looks it up.
func ValidHostID(id string) bool { return validID("h_", id) }

// ValidGroupID reports whether id has NewGroupID's form.
func ValidGroupID(id string) bool { return validID("g_", id) }

func validID(prefix, id string) bool {
	if len(id) != hostIDLen || id[:2] != prefix {
		return false
	}
	for i := 2; i < len(id); i++ {
		if strings.IndexByte(hostIDAlphabet, id[i]) < 0 {
			return false
		}
	}
	return true
}

// hostIDAlphabet is crockford's, lower-cased as NewHostID writes it.
const hostIDAlphabet = "0123456789abcdefghjkmnpqrstvwxyz"

func randomBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // never fails on supported platforms
	}
	return b
}

// Bearer is the token of a request's Authorization: Bearer header.
func Bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return "", false
	}
	return strings.TrimSpace(tok), true
}
