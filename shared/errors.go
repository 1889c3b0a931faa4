package shared

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
