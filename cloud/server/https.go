package server

import (
	"net/netip"
	"strings"

	"github.com/gin-gonic/gin"
)

// trustedPrefixes are Config.TrustedProxies as prefixes (an IP is a
// prefix of its full length); an entry that does not parse trusts no one,
// as gin's own list does.
func trustedPrefixes(list []string) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range list {
		if pfx, err := netip.ParsePrefix(p); err == nil {
			out = append(out, pfx.Masked())
			continue
		}
		if a, err := netip.ParseAddr(p); err == nil {
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
		}
	}
	return out
}

// ViaHTTPS says whether the client reached the cloud over HTTPS: the cloud
// serves TLS itself, or a trusted proxy (RELAY_TRUSTED_PROXIES) that
// terminated TLS says so with X-Forwarded-Proto: https. Anyone else's
// X-Forwarded-Proto is not believed.
func (s *Server) ViaHTTPS(c *gin.Context) bool {
	if c.Request.TLS != nil {
		return true
	}
	proto, _, _ := strings.Cut(c.GetHeader("X-Forwarded-Proto"), ",")
	if !strings.EqualFold(strings.TrimSpace(proto), "https") {
		return false
	}
	remote, err := netip.ParseAddr(c.RemoteIP())
	if err != nil {
		return false
	}
	remote = remote.Unmap()
	for _, p := range s.proxies {
		if p.Contains(remote) {
			return true
		}
	}
	return false
}
