package server

import (
	"crypto/hmac"
	"crypto/sha256"

	"github.com/gin-gonic/gin"
)

// ConsoleSessionKey keys the hashes under which the console stores its
// sessions: derived from the admin token, so that a session opened under
// one token is not found under another, and rotating or removing the
// token ends every session on every replica at once. nil when there is no
// admin token: then no session is valid.
func (s *Server) ConsoleSessionKey() []byte {
	if s.cfg.AdminToken == "" {
		return nil
	}
	m := hmac.New(sha256.New, []byte("relay console session key"))
	m.Write([]byte(s.cfg.AdminToken))
	return m.Sum(nil)
}

// endConsoleSessions is DELETE /api/console/sessions: every console
// session ends (each browser is sent to the login page) without changing
// the admin token.
func (s *Server) endConsoleSessions(c *gin.Context) {
	n, err := s.store.SessionDeleteAll(c.Request.Context())
	if err != nil {
		s.writeError(c, err)
		return
	}
	s.log.Info("console sessions ended", "ended", n, "client", c.ClientIP())
	c.JSON(200, gin.H{"ended": n})
}
