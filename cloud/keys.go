package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/relaykit/relay/cloud/server"
)

// rekey re-encrypts every stored source secret with the first key of the
// ring, so an old key can then be dropped from RELAY_SECRET_KEYS. It is safe
// while `cloud serve` runs: a source changed meanwhile is read again.
func rekey(ctx context.Context, args []string) error {
	var o options
	fs := flag.NewFlagSet("cloud rekey", flag.ContinueOnError)
	o.register(fs, false)
	o.registerKeys(fs)
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if err := o.envError(); err != nil {
		return err
	}
	log, err := o.logger()
	if err != nil {
		return err
	}
	ring, err := loadRing(&o)
	if err != nil {
		return err
	}
	st, err := openMigrated(ctx, o.databaseURL)
	if err != nil {
		return err
	}
	defer st.Close()
	res, err := server.Rekey(ctx, st, ring, time.Now().UTC())
	if err != nil {
		return fmt.Errorf("rekey: %w", err)
	}
	log.Info("secrets re-encrypted", "key_id", ring.SealingKeyID(), "sources", res.Sources,
		"sources_rewritten", res.Rewritten, "secrets_rewritten", res.Secrets)
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
