package server

import (
	"context"
	"errors"
	"log/slog"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

// notFoundAs is err, or, when the store found nothing, shared.NotFound(msg).
func notFoundAs(err error, msg string) error {
	if errors.Is(err, store.ErrNotFound) {
		return shared.NotFound(msg)
	}
	return err
}

// isUnavailable reports a storage failure (shared.Unavailable): the
// request may succeed later.
func isUnavailable(err error) bool { return shared.CodeOf(err) == shared.CodeUnavailable }

// Describe is the code and message an error is answered with: a
// shared.Error's own, the store's domain errors', else internal (the detail
// stays out of the message). Its status is shared.HTTPStatus(code). The
// console shows errors of the functions it shares with the API this way.
func Describe(err error) (code, message string) {
	ae := describe(err)
	return ae.Code, ae.Message
}

func describe(err error) *shared.Error {
	var ae *shared.Error
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, store.ErrNotFound):
		return &shared.Error{Code: shared.CodeNotFound, Message: "not found"}
	case errors.Is(err, store.ErrConflict):
		return &shared.Error{Code: shared.CodeConflict, Message: "conflict with an existing record"}
	default:
		return &shared.Error{Code: shared.CodeInternal, Message: "internal error", Cause: err}
	}
}

// writeError is the one place errors become HTTP answers. Errors that are not
// shared.Errors are internal: logged with their detail, answered without it.
func (s *Server) writeError(c *gin.Context, err error) {
	ae := describe(err)
	if ae.Code == shared.CodeInternal && errors.Is(err, context.Canceled) && c.Request.Context().Err() != nil {
		ae = &shared.Error{Code: shared.CodeCanceled, Message: "request canceled"}
	}
	status := shared.HTTPStatus(ae.Code)
	if status >= 500 && !ae.Quiet {
		s.log.LogAttrs(c.Request.Context(), slog.LevelError, "request failed",
			slog.String("method", c.Request.Method), slog.String("route", c.FullPath()),
			slog.Int("status", status), slog.Any("err", err))
	}
	writeErrorDetail(c, ae.Code, ae.Message)
}

// writeErrorDetail answers code and message in the common error shape, with
// the code's status.
func writeErrorDetail(c *gin.Context, code, message string) {
	c.AbortWithStatusJSON(shared.HTTPStatus(code), shared.ErrorResponse{Error: shared.ErrorDetail{Code: code, Message: message}})
}

// notFoundHandler answers unknown routes in the common error shape.
func notFoundHandler(c *gin.Context) {
	writeErrorDetail(c, shared.CodeNotFound, "no such endpoint")
}

func methodNotAllowedHandler(c *gin.Context) {
	writeErrorDetail(c, shared.CodeMethodNotAllowed, "method not allowed")
}
