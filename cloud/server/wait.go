package server

import (
	"context"

	"github.com/relaykit/relay/cloud/auth"
)

// StopWaiting answers every waiting heartbeat at once, and every later one
// without waiting: for a graceful shutdown (http.Server.RegisterOnShutdown).
func (s *Server) StopWaiting() { s.deliveries.StopWaiting() }

// RunWakeups feeds waiting heartbeats from the store's listener until ctx
// ends, listening again a second after a failure. Changes made while no one
// listened went untold: each time it listens again, the cache of intake's
// hosts and sources is reset.
func (s *Server) RunWakeups(ctx context.Context) {
	s.deliveries.Listen(ctx, func() {
		s.intake.ForgetAll()
		s.groups.Poke()
	}, func(id string) {
		s.intake.Forget(id)
		if auth.ValidGroupID(id) {
			// A group or one of its sources changed: its members as the
			// router sees them too.
			s.groups.Poke()
		}
	})
}

// WaitSockets waits until every socket's handler returned (after
// StopWaiting closed them), or ctx ends: hijacked connections are not
// waited for by the HTTP server's Shutdown.
func (s *Server) WaitSockets(ctx context.Context) error { return s.hosts.WaitSockets(ctx) }
