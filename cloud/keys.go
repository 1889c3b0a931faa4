package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
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

// parseProxies reads RELAY_TRUSTED_PROXIES: comma-separated IPs or CIDRs.
func parseProxies(list string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(list, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if net.ParseIP(p) == nil {
			if _, _, err := net.ParseCIDR(p); err != nil {
				return nil, usageError{fmt.Errorf("RELAY_TRUSTED_PROXIES: %q is neither an IP nor a CIDR", p)}
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// checkQuarantineShares refuses a host's share of the quarantine larger than
// the quarantine.
func (o *options) checkQuarantineShares() error {
	if o.quarantineMax > 0 && o.quarantineHostMax > o.quarantineMax {
		return usageError{fmt.Errorf("RELAY_QUARANTINE_HOST_MAX=%d: a host's share cannot be more than RELAY_QUARANTINE_MAX=%d", o.quarantineHostMax, o.quarantineMax)}
	}
	if o.quarantineMB > 0 && o.quarantineHostMB > o.quarantineMB {
		return usageError{fmt.Errorf("RELAY_QUARANTINE_HOST_MAX_MB=%d: a host's share cannot be more than RELAY_QUARANTINE_MAX_MB=%d", o.quarantineHostMB, o.quarantineMB)}
	}
	return nil
}
