package server

import "context"

// StopWaiting answers every waiting heartbeat at once, and every later one
// without waiting: for a graceful shutdown (http.Server.RegisterOnShutdown).
func (s *Server) StopWaiting() { s.deliveries.StopWaiting() }

// RunWakeups feeds waiting heartbeats from the store's listener until ctx
// ends, listening again a second after a failure. Changes made while no one
// listened went untold: each time it listens again, the cache of intake's
// hosts and sources is reset.
func (s *Server) RunWakeups(ctx context.Context) {
	s.deliveries.Listen(ctx, s.intake.ForgetAll, s.intake.Forget)
}

// WaitSockets waits until every socket's handler returned (after
// StopWaiting closed them), or ctx ends: hijacked connections are not
// waited for by the HTTP server's Shutdown.
func (s *Server) WaitSockets(ctx context.Context) error { return s.hosts.WaitSockets(ctx) }
