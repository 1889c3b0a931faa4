package main

import (
	"flag"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/relaykit/relay/host/config"
)

// cloudConsent is what a command's flags accept about the cloud it talks
// to: checkCloud refuses the rest.
type cloudConsent struct {
	// insecureHTTP (--insecure-http): plain http to another machine.
	insecureHTTP bool
	// otherCloud (--other-cloud): a cloud other than the one the host was
	// claimed from.
	otherCloud bool
}

// consentFlags adds --insecure-http and, for commands that send the
// host's credential (other than claim), --other-cloud to fs.
func consentFlags(fs *flag.FlagSet, withOtherCloud bool) *cloudConsent {
	c := &cloudConsent{}
	fs.BoolVar(&c.insecureHTTP, "insecure-http", false,
		"accept a plain http:// cloud that is not on this machine (everything travels in clear)")
	if withOtherCloud {
		fs.BoolVar(&c.otherCloud, "other-cloud", false,
			"send the host's credential to a cloud other than the one it was claimed from (credentials.json's cloud_url)")
	}
	return c
}

// checkCloud is the one rule of where the host's secrets may go, for every
// command that talks to the cloud: claim (the claim code, then the
// credential it receives), run and reconcile (the credential, the tokens
// and every webhook). target is the cloud the command would talk to, from
// names where target came from ("--cloud", "config cloud_url") for the
// messages, and claimed is the cloud_url of credentials.json ("" for claim,
// which sends no stored credential).
//
//   - Plain http to a machine other than this one (a host that is neither
//     "localhost" nor a loopback IP) is refused unless it is the cloud the
//     host was claimed from — which `host claim` accepted only with
//     --insecure-http — or c.insecureHTTP; either way a warning says it.
//   - A cloud other than the claimed one is refused unless c.otherCloud,
//     and then a warning says where the credential goes.
//
// Nothing is sent before it returns: an error is the command's usage
// error (exit 2); the warnings are to be printed before the command goes on.
func checkCloud(from, target, claimed string, c cloudConsent) (warnings []string, err error) {
	if err := config.CheckURL(target); err != nil {
		return nil, fmt.Errorf("%s: %w", from, err)
	}
	u, _ := url.Parse(target)
	isClaimed := claimed != "" && sameCloud(target, claimed)
	if u.Scheme == "http" && !loopbackHost(u.Hostname()) {
		secrets := "the host's credential, its tokens and every webhook"
		if claimed == "" {
			secrets = "the claim code, the host's credential and every webhook"
		}
		switch {
		case isClaimed:
			warnings = append(warnings, fmt.Sprintf("%s travel to %s in clear (plain http, accepted with --insecure-http when the host was claimed)",
				secrets, u.Redacted()))
		case c.insecureHTTP:
			warnings = append(warnings, fmt.Sprintf("--insecure-http: %s travel to %s in clear", secrets, u.Redacted()))
		default:
			return nil, fmt.Errorf("%s %s: plain http to another machine sends %s in clear; use https, or --insecure-http to accept that",
				from, u.Redacted(), secrets)
		}
	}
	if claimed != "" && !isClaimed {
		cu, _ := url.Parse(claimed)
		name := claimed
		if cu != nil {
			name = cu.Redacted()
		}
		if !c.otherCloud {
			return nil, fmt.Errorf("%s %s is not the cloud this host was claimed from (%s, in %s): the host's credential "+
				"would go to it; claim the host from that cloud, or give --other-cloud to send it there",
				from, u.Redacted(), name, config.CredentialsFile)
		}
		warnings = append(warnings, fmt.Sprintf("--other-cloud: the host's credential goes to %s, not to %s it was claimed from",
			u.Redacted(), name))
	}
	return warnings, nil
}

// sameCloud reports whether two cloud URLs name the same cloud: the same
// scheme, host (in any case) and port (a default one written or not), and
// the same path but for trailing slashes.
func sameCloud(a, b string) bool {
	ua, err := url.Parse(a)
	if err != nil {
		return false
	}
	ub, err := url.Parse(b)
	if err != nil {
		return false
	}
	port := func(u *url.URL) string {
		if p := u.Port(); p != "" {
			return p
		}
		if u.Scheme == "https" {
			return "443"
		}
		return "80"
	}
	return strings.EqualFold(ua.Scheme, ub.Scheme) && strings.EqualFold(ua.Hostname(), ub.Hostname()) &&
		port(ua) == port(ub) && strings.TrimRight(ua.EscapedPath(), "/") == strings.TrimRight(ub.EscapedPath(), "/") &&
		ua.User.String() == ub.User.String()
}

// loopbackHost reports whether a URL's host is this machine: "localhost" or
// a loopback IP.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
