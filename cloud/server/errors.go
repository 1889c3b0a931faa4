package server

import (
	"context"
	"errors"
	"log/slog"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/intake"
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
	return errors.As(err, &ae) && ae.code == shared.CodeUnavailable || intake.IsUnavailable(err)
}

// Describe is the code and message an error is answered with: an
// apiError's own, the store's domain errors', else internal (the detail
// stays out of the message). Its status is shared.HTTPStatus(code). The
// console shows errors of the functions it shares with the API this way.
func Describe(err error) (code, message string) {
	ae := describe(err)
	return ae.code, ae.message
}

func describe(err error) *apiError {
	var ae *apiError
	var ie *intake.Error
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &ie):
		return &apiError{code: ie.Code, message: ie.Message, cause: ie.Cause, quiet: ie.Quiet}
	case errors.Is(err, store.ErrNotFound):
		return &apiError{code: shared.CodeNotFound, message: "not found"}
	case errors.Is(err, store.ErrConflict):
		return &apiError{code: shared.CodeConflict, message: "conflict with an existing record"}
	default:
		return &apiError{code: shared.CodeInternal, message: "internal error", cause: err}
	}
}

// writeError is the one place errors become HTTP answers. Errors that are not
// apiErrors are internal: logged with their detail, answered without it.
func (s *Server) writeError(c *gin.Context, err error) {
	ae := describe(err)
	if ae.code == shared.CodeInternal && errors.Is(err, context.Canceled) && c.Request.Context().Err() != nil {
		ae = &apiError{code: shared.CodeCanceled, message: "request canceled"}
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
