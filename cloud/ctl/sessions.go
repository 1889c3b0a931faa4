package ctl

import (
	"context"
	"fmt"
)

// sessionsEndAll ends every console session without rotating the admin
// token: each browser is sent to the login page.
func sessionsEndAll(ctx context.Context, e *env, args []string, auth func() error) error {
	f := newFlags(e, "sessions end-all [--json]  (logs every console session out)")
	if _, err := f.parseAuthed(args, 0, 0, auth); err != nil {
		return err
	}
	var out struct {
		Ended int `json:"ended"`
	}
	if done, err := e.fetch(ctx, "DELETE", "/api/console/sessions", nil, nil, &out); done {
		return err
	}
	fmt.Fprintf(e.stdout, "ended %d console sessions\n", out.Ended)
	return nil
}
