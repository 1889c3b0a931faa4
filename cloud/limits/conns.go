package limits

import (
	"net"
	"sync"
)

// LimitConns returns ln with at most max connections open per client
// address (AddrKey of the peer's address); a connection past that is
// reset as soon as it is accepted, and refused is called.
func LimitConns(ln net.Listener, max int, refused func()) net.Listener {
	return &connLimiter{Listener: ln, max: max, open: map[string]int{}, refused: refused}
}

type connLimiter struct {
	net.Listener
	max     int
	refused func()

	mu   sync.Mutex
	open map[string]int // address → connections open; no entry when none
}

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key := peerKey(c.RemoteAddr())
		l.mu.Lock()
		ok := l.open[key] < l.max
		if ok {
			l.open[key]++
		}
		l.mu.Unlock()
		if ok {
			return &limitedConn{Conn: c, l: l, key: key}, nil
		}
		l.refused()
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset: nothing kept in TIME_WAIT for a flood
		}
		c.Close()
	}
}

func (l *connLimiter) release(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[key]--; l.open[key] <= 0 {
		delete(l.open, key)
	}
}

// peerKey is addrKey of a connection's peer address.
func peerKey(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return AddrKey(ta.IP.String())
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return AddrKey(host)
}

// limitedConn gives its place back when it is closed (once, however many
// times Close is called).
type limitedConn struct {
	net.Conn
	l    *connLimiter
	key  string
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.key) })
	return err
}
