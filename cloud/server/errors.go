package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

// apiError is an error with the status and code it is answered with.
type apiError struct {
	status  int
	code    string
	message string
	cause   error // logged, never answered
	quiet   bool  // a 5xx its caller logs (sampled): writeError does not
}

func (e *apiError) Error() string {
	if e.cause != nil {
		return e.message + ": " + e.cause.Error()
	}
	return e.message
}

func (e *apiError) Unwrap() error { return e.cause }

func errInvalid(msg string) error {
	return &apiError{status: 400, code: shared.CodeInvalid, message: msg}
}
func errUnauthorized(msg string) error {
	return &apiError{status: 401, code: shared.CodeUnauthorized, message: msg}
}
func errNotFound(msg string) error {
	return &apiError{status: 404, code: shared.CodeNotFound, message: msg}
}

// errUnavailable marks a storage failure: the sender should retry later.
func errUnavailable(cause error) error {
	return &apiError{status: 503, code: shared.CodeUnavailable, message: "storage unavailable, retry later", cause: cause}
}

// isUnavailable reports a storage failure (errUnavailable): the request may
// succeed later.
func isUnavailable(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.code == shared.CodeUnavailable
}

// writeError is the one place errors become HTTP answers. Errors that are not
// apiErrors are internal: logged with their detail, answered without it.
func (s *Server) writeError(c *gin.Context, err error) {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
	case errors.Is(err, store.ErrNotFound):
		ae = &apiError{status: 404, code: shared.CodeNotFound, message: "not found"}
	case errors.Is(err, store.ErrConflict):
		ae = &apiError{status: 409, code: shared.CodeConflict, message: "conflict with an existing record"}
	case errors.Is(err, context.Canceled) && c.Request.Context().Err() != nil:
		ae = &apiError{status: 499, code: "canceled", message: "request canceled"}
	default:
		ae = &apiError{status: 500, code: shared.CodeInternal, message: "internal error", cause: err}
	}
	if ae.status >= 500 && !ae.quiet {
		s.log.LogAttrs(c.Request.Context(), slog.LevelError, "request failed",
			slog.String("method", c.Request.Method), slog.String("route", c.FullPath()),
			slog.Int("status", ae.status), slog.Any("err", err))
	}
	c.AbortWithStatusJSON(ae.status, shared.ErrorResponse{Error: shared.ErrorDetail{Code: ae.code, Message: ae.message}})
}

// notFoundHandler answers unknown routes in the common error shape.
func notFoundHandler(c *gin.Context) {
	c.AbortWithStatusJSON(http.StatusNotFound, shared.ErrorResponse{Error: shared.ErrorDetail{Code: shared.CodeNotFound, Message: "no such endpoint"}})
}

func methodNotAllowedHandler(c *gin.Context) {
	c.AbortWithStatusJSON(http.StatusMethodNotAllowed, shared.ErrorResponse{Error: shared.ErrorDetail{Code: "method_not_allowed", Message: "method not allowed"}})
}
