package shared

import "errors"

// Error is a refusal with one of the codes above (CodeInvalid, …): the
// cloud's packages decide them, and its HTTP edge answers each with
// HTTPStatus(Code) and Message in ErrorResponse's shape, in one place.
type Error struct {
	Code    string
	Message string
	Cause   error // logged, never answered
	Quiet   bool  // a 5xx its decider logged itself (sampled): the edge does not
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return e.Message + ": " + e.Cause.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Cause }

// Invalid is a refusal of bad input (400).
func Invalid(msg string) error { return &Error{Code: CodeInvalid, Message: msg} }

// NotFound is a refusal for something that does not exist (404).
func NotFound(msg string) error { return &Error{Code: CodeNotFound, Message: msg} }

// Unauthorized is a refusal of missing or bad credentials (401).
func Unauthorized(msg string) error { return &Error{Code: CodeUnauthorized, Message: msg} }

// Unavailable marks a storage failure (503): the sender should retry
// later. The cause is logged, never answered.
func Unavailable(cause error) error {
	return &Error{Code: CodeUnavailable, Message: "storage unavailable, retry later", Cause: cause}
}

// CodeOf is err's code when it is (or wraps) an *Error, else "".
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// Truncate cuts s to at most n bytes: what a bounded message or note keeps.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
