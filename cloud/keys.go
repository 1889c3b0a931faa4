package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/relaykit/relay/cloud/intake"
	"github.com/relaykit/relay/cloud/secrets"
	"github.com/relaykit/relay/cloud/server"
)

// rekey re-encrypts every stored source secret with the first key of the
// ring, so an old key can then be dropped from the ring. It is safe while
// `cloud serve` runs once every server holds the new key (SIGHUP with
// RELAY_SECRET_KEYS_FILE): a source changed meanwhile is read again.
func rekey(ctx context.Context, args []string) error {
	var o options
	fs := o.flagSet("rekey")
	log, err := o.parseFlags(fs, args)
	if err != nil {
		return err
	}
	ring, err := loadRing(&o)
	if err != nil {
		return err
	}
	st, _, err := openMigrated(ctx, o.databaseURL, o.sqliteCacheMB)
	if err != nil {
		return err
	}
	defer st.Close()
	res, err := intake.Rekey(ctx, st, ring, time.Now().UTC())
	if err != nil {
		return fmt.Errorf("rekey: %w", err)
	}
	log.Info("secrets re-encrypted", "key_id", ring.SealingKeyID(), "sources", res.Sources,
		"sources_rewritten", res.Rewritten, "secrets_rewritten", res.Secrets, "sinks_rewritten", res.Sinks)
	fmt.Fprintf(os.Stdout, "re-encrypted %d secrets in %d of %d sources with key %s\n",
		res.Secrets, res.Rewritten, res.Sources, ring.SealingKeyID())
	if len(res.Failed) > 0 {
		for _, f := range res.Failed {
			fmt.Fprintf(os.Stderr, "cloud rekey: left as it was: %s\n", f)
		}
		return fmt.Errorf("rekey: %d sources have secrets no configured key decrypts: add the key that sealed them to RELAY_SECRET_KEYS and run again", len(res.Failed))
	}
	return nil
}

// readKeysFile reads RELAY_SECRET_KEYS_FILE: base64 32-byte keys separated
// by commas or line breaks, the first of which encrypts.
func readKeysFile(path string) (*secrets.Ring, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return secrets.ParseRing(string(b))
}

// reloadKeys is what SIGHUP does to a running `cloud serve`: it reads the
// key ring again from where it came from and hands it to the server, which
// drops what it opened with the old ring, checks the canary and releases
// the quarantine. A ring that does not load leaves the running one as it is.
func reloadKeys(ctx context.Context, o *options, srv *server.Server, log *slog.Logger) {
	if o.secretKeys != "" {
		log.Warn("SIGHUP: RELAY_SECRET_KEYS is read from the environment, which cannot change while the process runs: set RELAY_SECRET_KEYS_FILE instead to rotate keys without a restart; checking the canary and the quarantine with the keys as they are")
	}
	ring, err := loadRing(o)
	if err != nil {
		log.Error("SIGHUP: secret keys not reloaded; the running key ring is kept", "err", err)
		return
	}
	if err := srv.ReloadKeys(ctx, ring); err != nil {
		log.Error("SIGHUP: secret keys reloaded, but checking them failed", "err", err)
	}
}

// loadRing builds the secret key ring from RELAY_SECRET_KEYS, from
// RELAY_SECRET_KEYS_FILE, or from the key file in the data dir (created on
// first use).
func loadRing(o *options) (*secrets.Ring, error) {
	if o.dataDir == "" {
		o.dataDir = "./data"
		if p, ok := strings.CutPrefix(o.databaseURL, "sqlite:"); ok {
			o.dataDir = filepath.Dir(strings.TrimPrefix(p, "//"))
		}
	}
	if o.secretKeys != "" {
		r, err := secrets.ParseRing(o.secretKeys)
		if err != nil {
			return nil, usageError{fmt.Errorf("RELAY_SECRET_KEYS: %w", err)}
		}
		return r, nil
	}
	if o.secretKeysFile != "" {
		r, err := readKeysFile(o.secretKeysFile)
		if err != nil {
			return nil, usageError{fmt.Errorf("RELAY_SECRET_KEYS_FILE: %w", err)}
		}
		return r, nil
	}
	k, err := secrets.LoadOrCreateKeyFile(filepath.Join(o.dataDir, "secret.key"))
	if err != nil {
		return nil, err
	}
	return secrets.NewRing(k)
}

// loadJWTKey is the key that signs host tokens: RELAY_JWT_KEY, or the key
// file in the data dir (created on first use). Call after loadRing, which
// settles the data dir.
func loadJWTKey(o options) ([]byte, error) {
	if o.jwtKey != "" {
		if len(o.jwtKey) < 32 {
			return nil, usageError{errors.New("RELAY_JWT_KEY must be at least 32 bytes")}
		}
		return []byte(o.jwtKey), nil
	}
	return secrets.LoadOrCreateKeyFile(filepath.Join(o.dataDir, "jwt.key"))
}
