package server

import (
	"context"
	"errors"
	"log/slog"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

// apiError is an error with the code it is answered with (its status is
// shared.HTTPStatus's).
type apiError struct {
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
	return &apiError{code: shared.CodeInvalid, message: msg}
}
func errUnauthorized(msg string) error {
	return &apiError{code: shared.CodeUnauthorized, message: msg}
}
func errNotFound(msg string) error {
	return &apiError{code: shared.CodeNotFound, message: msg}
}

// errUnavailable marks a storage failure: the sender should retry later.
func errUnavailable(cause error) error {
	return &apiError{code: shared.CodeUnavailable, message: "storage unavailable, retry later", cause: cause}
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
		ae = &apiError{code: shared.CodeNotFound, message: "not found"}
	case errors.Is(err, store.ErrConflict):
		ae = &apiError{code: shared.CodeConflict, message: "conflict with an existing record"}
	case errors.Is(err, context.Canceled) && c.Request.Context().Err() != nil:
		ae = &apiError{code: shared.CodeCanceled, message: "request canceled"}
	default:
		ae = &apiError{code: shared.CodeInternal, message: "internal error", cause: err}
	}
	status := shared.HTTPStatus(ae.code)
	if status >= 500 && !ae.quiet {
		s.log.LogAttrs(c.Request.Context(), slog.LevelError, "request failed",
			slog.String("method", c.Request.Method), slog.String("route", c.FullPath()),
			slog.Int("status", status), slog.Any("err", err))
	}
	writeErrorDetail(c, ae.code, ae.message)
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
