package alert

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// refusedNets are the networks a sink may not reach unless the operator
// allows them (Config.SinkAllow, RELAY_ALERT_SINK_ALLOW): an admin who can
// add a sink would otherwise make the cloud post to itself, to the cloud
// provider's metadata service (169.254.169.254) or to the private network
// it runs in. IPv4-mapped IPv6 addresses are checked as the IPv4 address
// they map.
var refusedNets = []struct {
	what   string
	prefix netip.Prefix
}{
	{"unspecified", netip.MustParsePrefix("0.0.0.0/8")},
	{"unspecified", netip.MustParsePrefix("::/128")},
	{"loopback", netip.MustParsePrefix("127.0.0.0/8")},
	{"loopback", netip.MustParsePrefix("::1/128")},
	{"link-local", netip.MustParsePrefix("169.254.0.0/16")},
	{"link-local", netip.MustParsePrefix("fe80::/10")},
	{"private", netip.MustParsePrefix("10.0.0.0/8")},
	{"private", netip.MustParsePrefix("172.16.0.0/12")},
	{"private", netip.MustParsePrefix("192.168.0.0/16")},
	{"private", netip.MustParsePrefix("fc00::/7")},
	{"multicast", netip.MustParsePrefix("224.0.0.0/4")},
	{"multicast", netip.MustParsePrefix("ff00::/8")},
	{"broadcast", netip.MustParsePrefix("255.255.255.255/32")},
}

// ErrSinkAddress is why a sink's address is refused: see refusedNets.
var ErrSinkAddress = errors.New("alert sink address refused")

// ParseSinkAllow parses RELAY_ALERT_SINK_ALLOW: comma-separated IPs or
// CIDRs that sinks may reach although they are in refusedNets.
func ParseSinkAllow(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, part := range strings.Split(list, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if strings.Contains(part, "/") {
			p, err := netip.ParsePrefix(part)
			if err != nil {
				return nil, fmt.Errorf("%q: not an IP or CIDR", part)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(part)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("%q: not an IP or CIDR", part)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// checkSinkAddr refuses an address in refusedNets that allow does not
// list.
func checkSinkAddr(a netip.Addr, allow []netip.Prefix) error {
	a = a.WithZone("").Unmap()
	for _, p := range allow {
		if p.Contains(a) {
			return nil
		}
	}
	for _, n := range refusedNets {
		if n.prefix.Contains(a) {
			return fmt.Errorf("%w: %s is %s (RELAY_ALERT_SINK_ALLOW lists the networks sinks may reach)", ErrSinkAddress, a, n.what)
		}
	}
	return nil
}

// checkSinkHost is the check of a sink's URL when it is added: a host
// written as an IP address must not be refused. A name is resolved, and
// checked, each time a notification is sent (see sinkClient): what it
// resolves to when the sink is added proves nothing.
func checkSinkHost(u *url.URL, allow []netip.Prefix) error {
	host := u.Hostname()
	if a, err := netip.ParseAddr(host); err == nil {
		return checkSinkAddr(a, allow)
	}
	// A name whose last label is a number is an IP address in a form
	// some resolvers take (127.1, 0x7f000001): not a name DNS can hold.
	labels := strings.Split(strings.TrimSuffix(host, "."), ".")
	last := strings.ToLower(labels[len(labels)-1])
	if last == "" || strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x") {
		return fmt.Errorf("%w: %q: write an IP address in its usual form", ErrSinkAddress, host)
	}
	return nil
}

// sinkClient sends notifications. Its dialer checks each address it
// connects to, once the name is resolved, so a name that resolves to a
// refused address (at any time, as DNS rebinding does) is refused too. It
// connects directly, without the environment's proxy, whose own dialing
// would escape the check, and follows no redirect: a sink answering 3xx
// fails, as any answer other than 2xx.
func sinkClient(allow []netip.Prefix) *http.Client {
	dialer := &net.Dialer{
		Timeout:   10 * time.Second,
		KeepAlive: 30 * time.Second,
		Control: func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("%w: %q is not an IP address", ErrSinkAddress, address)
			}
			return checkSinkAddr(ap.Addr(), allow)
		},
	}
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext:         dialer.DialContext,
			ForceAttemptHTTP2:   true,
			TLSHandshakeTimeout: 10 * time.Second,
			MaxIdleConns:        10,
			IdleConnTimeout:     90 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
