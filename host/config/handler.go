package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// fileHandler is a handler in the file's JSON shape: a source's own or a
// route's. Pointers tell "absent" from zero.
type fileHandler struct {
	Forward          string   `json:"forward"`
	Exec             []string `json:"exec"`
	Retry4xx         *bool    `json:"retry_4xx"`
	RetryNonzeroExit *bool    `json:"retry_nonzero_exit"`
	ConnectTimeoutS  *float64 `json:"connect_timeout_s"`
	TimeoutS         *float64 `json:"timeout_s"`
}

// set reports whether h names a handler (forward or exec).
func (h fileHandler) set() bool { return h.Forward != "" || h.Exec != nil }

// optionsApply checks that a source's options apply to some handler of the
// source (its own or its routes').
func (h fileHandler) optionsApply(kinds map[string]bool) error {
	if h.Retry4xx != nil && !kinds["forward"] {
		return at("retry_4xx", errors.New("applies to forward handlers, and this source has none"))
	}
	if h.ConnectTimeoutS != nil && !kinds["forward"] {
		return at("connect_timeout_s", errors.New("applies to forward handlers, and this source has none"))
	}
	if h.RetryNonzeroExit != nil && !kinds["exec"] {
		return at("retry_nonzero_exit", errors.New("applies to exec handlers, and this source has none"))
	}
	return nil
}

// parseHandler validates h; options h leaves unset come from defaults (the
// source's, for a route), else from the handler kind's defaults. strict
// refuses options of the other handler kind; checkProgram, when set,
// checks an exec handler's program.
func parseHandler(h, defaults fileHandler, baseDir string, strict bool, checkProgram func(string) error) (Handler, error) {
	if h.Forward != "" && h.Exec != nil {
		return Handler{}, errors.New("set only one of forward and exec")
	}
	out := Handler{Retry4xx: true, RetryNonzeroExit: true, ConnectTimeout: DefaultConnectTimeout}
	if h.Forward != "" {
		if err := CheckURL(h.Forward); err != nil {
			return Handler{}, at("forward", err)
		}
		if strict && h.RetryNonzeroExit != nil {
			return Handler{}, at("retry_nonzero_exit", errors.New("applies to exec handlers, not forward"))
		}
		out.Forward, out.Timeout = h.Forward, DefaultForwardTimeout
	} else {
		if len(h.Exec) == 0 || h.Exec[0] == "" {
			return Handler{}, at("exec", errors.New(`needs a program as its first element: ["./script.sh", "arg"]`))
		}
		if strict && h.Retry4xx != nil {
			return Handler{}, at("retry_4xx", errors.New("applies to forward handlers, not exec"))
		}
		if strict && h.ConnectTimeoutS != nil {
			return Handler{}, at("connect_timeout_s", errors.New("applies to forward handlers, not exec"))
		}
		argv := slices.Clone(h.Exec)
		argv[0] = ResolveProgram(argv[0], baseDir)
		if checkProgram != nil {
			if err := checkProgram(argv[0]); err != nil {
				if argv[0] != h.Exec[0] {
					err = fmt.Errorf("%q (%s): %w", h.Exec[0], argv[0], err)
				} else {
					err = fmt.Errorf("%q: %w", h.Exec[0], err)
				}
				return Handler{}, at("exec", err)
			}
		}
		out.Exec, out.Timeout = argv, DefaultExecTimeout
	}
	pick := func(own, def *float64) *float64 {
		if own != nil {
			return own
		}
		return def
	}
	if v := pick(h.ConnectTimeoutS, defaults.ConnectTimeoutS); v != nil {
		d, err := seconds(*v, 24*3600)
		if err != nil {
			return Handler{}, at("connect_timeout_s", err)
		}
		out.ConnectTimeout = d
	}
	if v := pick(h.TimeoutS, defaults.TimeoutS); v != nil {
		d, err := seconds(*v, 24*3600)
		if err != nil {
			return Handler{}, at("timeout_s", err)
		}
		out.Timeout = d
	}
	for _, b := range []struct {
		own, def *bool
		dst      *bool
	}{{h.Retry4xx, defaults.Retry4xx, &out.Retry4xx}, {h.RetryNonzeroExit, defaults.RetryNonzeroExit, &out.RetryNonzeroExit}} {
		if b.own != nil {
			*b.dst = *b.own
		} else if b.def != nil {
			*b.dst = *b.def
		}
	}
	return out, nil
}

// ResolveProgram is where an exec program runs from: a relative path with
// a separator ("./x.sh", "scripts/x.sh", "../bin/x") joined to baseDir
// (the configuration file's directory), an absolute path as it is, and a
// bare name ("python3") as it is, for $PATH to find when it runs.
func ResolveProgram(program, baseDir string) string {
	if filepath.IsAbs(program) || bare(program) {
		return program
	}
	return filepath.Join(baseDir, program)
}

// bare reports whether a program is a name alone, without a directory.
func bare(program string) bool {
	return !strings.ContainsRune(program, '/') && !strings.ContainsRune(program, filepath.Separator)
}

// CheckProgram says why a resolved exec program could not run: a path
// that does not exist, is a directory or is not executable, or a bare name
// that $PATH does not hold.
func CheckProgram(program string) error {
	if bare(program) {
		if _, err := exec.LookPath(program); err != nil {
			return fmt.Errorf(`not found in $PATH (a program without a "/" is looked up in $PATH; write "./%s" for one beside the configuration file)`, program)
		}
		return nil
	}
	st, err := os.Stat(program)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return errors.New("no such file (a relative program is resolved against the configuration file's directory)")
	case err != nil:
		return err
	case st.IsDir():
		return errors.New("is a directory, not a program")
	case st.Mode().Perm()&0o111 == 0:
		return errors.New("is not executable (chmod +x it)")
	}
	return nil
}

// CheckURL accepts an absolute http or https URL with a host.
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("invalid URL %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("invalid URL %q: scheme must be http or https", raw)
	}
	if u.Host == "" {
		return fmt.Errorf("invalid URL %q: no host", raw)
	}
	return nil
}
