// Package secrets seals source secrets at rest with AES-256-GCM under a key
// ring: the first key encrypts, every key decrypts, and each ciphertext names
// the key that sealed it so keys can be rotated.
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
)

// ErrNoKey means no key of the ring can open a ciphertext: the key that
// sealed it is not configured (rotated out or lost).
var ErrNoKey = errors.New("no configured key can decrypt this secret")

// version prefixes every ciphertext so the format can change later.
const version = "v1"

// Ring is an ordered set of AES-256 keys. Replace swaps them for every
// holder of the ring at once; each call sees one set or the other.
type Ring struct {
	keys atomic.Pointer[[]key]
}

type key struct {
	id   string // first 8 hex of sha256(key): names the key without revealing it
	aead cipher.AEAD
}

// NewRing builds a ring from raw 32-byte keys; the first one seals.
func NewRing(raw ...[]byte) (*Ring, error) {
	if len(raw) == 0 {
		return nil, errors.New("secret key ring: no keys")
	}
	var keys []key
	for i, k := range raw {
		if len(k) != 32 {
			return nil, fmt.Errorf("secret key %d: want 32 bytes, got %d", i+1, len(k))
		}
		block, err := aes.NewCipher(k)
		if err != nil {
			return nil, fmt.Errorf("secret key %d: %w", i+1, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("secret key %d: %w", i+1, err)
		}
		sum := sha256.Sum256(k)
		keys = append(keys, key{id: hex.EncodeToString(sum[:4]), aead: aead})
	}
	r := &Ring{}
	r.keys.Store(&keys)
	return r, nil
}

// Replace makes r hold other's keys from now on: a running server reloads
// its keys in place, and what is sealed or opened after Replace uses them.
func (r *Ring) Replace(other *Ring) { r.keys.Store(other.keys.Load()) }

func (r *Ring) load() []key { return *r.keys.Load() }

// ParseRing parses RELAY_SECRET_KEYS: comma-separated standard base64 keys of
// 32 bytes each. Line breaks separate keys too, as in a keys file.
func ParseRing(list string) (*Ring, error) {
	var raw [][]byte
	list = strings.NewReplacer("\r\n", ",", "\n", ",").Replace(list)
	for i, part := range strings.Split(list, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(part)
		if err != nil {
			return nil, fmt.Errorf("secret key %d: not base64: %w", i+1, err)
		}
		raw = append(raw, k)
	}
	return NewRing(raw...)
}

// LoadOrCreateKeyFile reads a base64 32-byte key from path, creating it (0600,
// with its directory 0700) with a fresh random key if it does not exist.
func LoadOrCreateKeyFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
		if err != nil || len(k) != 32 {
			return nil, fmt.Errorf("key file %s: want base64 of 32 bytes", path)
		}
		return k, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("key file: %w", err)
	}
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) { // created concurrently: read theirs
			return LoadOrCreateKeyFile(path)
		}
		return nil, fmt.Errorf("key file: %w", err)
	}
	if _, err := f.WriteString(base64.StdEncoding.EncodeToString(k) + "\n"); err != nil {
		f.Close()
		return nil, fmt.Errorf("key file: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, fmt.Errorf("key file: %w", err)
	}
	return k, f.Close()
}

// Seal encrypts plaintext with the first key: "v1:<key id>:<base64(nonce|ct)>".
// The additional data binds the ciphertext to its context (e.g. host/source),
// so a sealed secret copied to another row does not open.
func (r *Ring) Seal(plaintext, context []byte) (string, error) {
	k := r.load()[0]
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("seal: %w", err)
	}
	ct := k.aead.Seal(nonce, nonce, plaintext, context)
	return version + ":" + k.id + ":" + base64.StdEncoding.EncodeToString(ct), nil
}

// Open decrypts a ciphertext made by Seal with the same context. It returns
// ErrNoKey when the sealing key is not in the ring.
func (r *Ring) Open(sealed string, context []byte) ([]byte, error) {
	parts := strings.SplitN(sealed, ":", 3)
	if len(parts) != 3 || parts[0] != version {
		return nil, errors.New("open: malformed ciphertext")
	}
	ct, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil {
		return nil, fmt.Errorf("open: malformed ciphertext: %w", err)
	}
	for _, k := range r.load() {
		if k.id != parts[1] {
			continue
		}
		ns := k.aead.NonceSize()
		if len(ct) < ns {
			return nil, errors.New("open: malformed ciphertext")
		}
		pt, err := k.aead.Open(nil, ct[:ns], ct[ns:], context)
		if err != nil {
			return nil, fmt.Errorf("open: %w", err)
		}
		return pt, nil
	}
	return nil, ErrNoKey
}

// SealingKeyID names the key Seal uses: the first of the ring.
func (r *Ring) SealingKeyID() string { return r.load()[0].id }

// KeyIDs names every key of the ring, in order.
func (r *Ring) KeyIDs() []string {
	keys := r.load()
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = k.id
	}
	return ids
}

// KeyID names the key a ciphertext was sealed with.
func KeyID(sealed string) string {
	parts := strings.SplitN(sealed, ":", 3)
	if len(parts) != 3 {
		return ""
	}
	return parts[1]
}

// Fingerprint is a short name for a secret that may be shown to operators:
// the first 16 hex of HMAC-SHA256 of the secret under key, a key only the
// cloud holds. Without the key, a fingerprint tells nothing about the
// secret: it cannot be used to test guessed secrets. The same secret gets
// the same fingerprint under the same key, so secrets set at different
// times can be told apart or matched.
func Fingerprint(key, secret []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("relay-secret-fingerprint\x00"))
	m.Write(secret)
	return hex.EncodeToString(m.Sum(nil))[:fingerprintLen]
}

// fingerprintLen is the length of a Fingerprint, longer than the 12 hex of
// the unkeyed fingerprints stored before fingerprints were keyed, so that
// those can be told apart (see Unkeyed).
const fingerprintLen = 16

// Unkeyed reports whether a stored fingerprint was made the old way, as
// the first 12 hex of an unkeyed SHA-256 of the secret: one that must not
// be shown, since it lets whoever sees it test guessed secrets offline.
func Unkeyed(fp string) bool {
	if len(fp) != 12 {
		return false
	}
	for _, c := range fp {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
