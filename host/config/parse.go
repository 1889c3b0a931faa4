package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/relaykit/relay/host/summary"
	"github.com/relaykit/relay/shared"
)

// The file's JSON shape. Pointers tell "absent" from zero.
type fileConfig struct {
	CloudURL            string                `json:"cloud_url"`
	HeartbeatIntervalS  *int                  `json:"heartbeat_interval_s"`
	Workers             *int                  `json:"workers"`
	MaxBackoffS         *float64              `json:"max_backoff_s"`
	Transport           *string               `json:"transport"`
	Compress            *bool                 `json:"compress"`
	ShutdownGraceS      *float64              `json:"shutdown_grace_s"`
	LedgerRetentionDays *int                  `json:"ledger_retention_days"`
	Webhooks            map[string]fileSource `json:"webhooks"`
}

type fileRoute struct {
	Events []string `json:"events"`
	fileHandler
}

type fileSource struct {
	Enabled  bool        `json:"enabled"`
	Events   []string    `json:"events"`
	Parallel bool        `json:"parallel"`
	Provider string      `json:"provider"`
	Routes   []fileRoute `json:"routes"`
	fileHandler
}

// syntaxError is JSON that does not parse (or a value encoding/json
// refuses), at a line and column of the file (both from 1).
type syntaxError struct {
	line, col int
	msg       string
}

func (e *syntaxError) Error() string {
	return fmt.Sprintf("line %d, column %d: %s", e.line, e.col, e.msg)
}

// jsonError places a decoding error of data at its line and column, when
// encoding/json says where (a syntax error, a value of the wrong type).
func jsonError(data []byte, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var offset int64
	switch {
	case errors.As(err, &syn):
		offset = syn.Offset
	case errors.As(err, &typ):
		offset = typ.Offset
	case errors.Is(err, io.ErrUnexpectedEOF):
		offset = int64(len(data)) + 1 // just past the end
	case errors.Is(err, io.EOF):
		return errors.New("invalid JSON: the file is empty")
	default:
		return fmt.Errorf("invalid JSON: %w", err)
	}
	line, col := position(data, offset)
	msg := "invalid JSON: " + err.Error()
	if errors.Is(err, io.ErrUnexpectedEOF) {
		msg = "invalid JSON: the file ends before the JSON does"
	}
	if typ != nil {
		msg = "invalid configuration: " + err.Error()
	}
	return &syntaxError{line: line, col: col, msg: msg}
}

// position is the line and column (from 1, the column in characters) of
// the byte before offset in data: encoding/json's offsets count the bytes
// read, up to and including the one that went wrong.
func position(data []byte, offset int64) (line, col int) {
	offset = min(max(offset, 1), int64(len(data))+1)
	before := data[:offset-1]
	line = 1 + bytes.Count(before, []byte("\n"))
	start := bytes.LastIndexByte(before, '\n') + 1
	col = 1 + utf8.RuneCount(before[start:])
	return line, col
}

func parse(data []byte, baseDir string, checkProgram func(string) error) (*Config, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var raw any
	if err := dec.Decode(&raw); err != nil {
		return nil, jsonError(data, err)
	}
	end := dec.InputOffset()
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		rest := data[end:]
		at := end + int64(len(rest)-len(bytes.TrimLeft(rest, " \t\r\n")))
		line, col := position(data, at+1)
		return nil, &syntaxError{line: line, col: col, msg: "invalid JSON: unexpected data after the top-level object"}
	}
	if err := fileSchema.check("", raw); err != nil {
		return nil, err
	}
	// The shape is known good: this decode cannot fail on types or keys.
	strict := json.NewDecoder(bytes.NewReader(data))
	strict.DisallowUnknownFields()
	var f fileConfig
	if err := strict.Decode(&f); err != nil {
		return nil, jsonError(data, err)
	}

	c := &Config{
		HeartbeatInterval: DefaultHeartbeatInterval,
		Workers:           DefaultWorkers,
		MaxBackoff:        DefaultMaxBackoff,
		Transport:         DefaultTransport,
		ShutdownGrace:     DefaultShutdownGrace,
		LedgerRetention:   DefaultLedgerRetention,
		Webhooks:          make(map[string]Source, len(f.Webhooks)),
	}
	if f.CloudURL != "" {
		if err := CheckURL(f.CloudURL); err != nil {
			return nil, fmt.Errorf("cloud_url: %w", err)
		}
		c.CloudURL = strings.TrimRight(f.CloudURL, "/")
	}
	if f.HeartbeatIntervalS != nil {
		if *f.HeartbeatIntervalS < 1 || *f.HeartbeatIntervalS > 3600 {
			return nil, fmt.Errorf("heartbeat_interval_s: must be between 1 and 3600, got %d", *f.HeartbeatIntervalS)
		}
		c.HeartbeatInterval = time.Duration(*f.HeartbeatIntervalS) * time.Second
	}
	if f.Workers != nil {
		if *f.Workers < 1 || *f.Workers > 256 {
			return nil, fmt.Errorf("workers: must be between 1 and 256, got %d", *f.Workers)
		}
		c.Workers = *f.Workers
	}
	if f.MaxBackoffS != nil {
		d, err := seconds(*f.MaxBackoffS, 3600)
		if err != nil {
			return nil, fmt.Errorf("max_backoff_s: %w", err)
		}
		c.MaxBackoff = max(d, time.Second)
	}
	if f.Transport != nil {
		switch *f.Transport {
		case "auto", "websocket", "heartbeat":
			c.Transport = *f.Transport
		default:
			return nil, fmt.Errorf("transport: must be auto, websocket or heartbeat, got %q", *f.Transport)
		}
	}
	if f.Compress != nil {
		c.Compress = *f.Compress
	}
	if f.ShutdownGraceS != nil {
		d, err := seconds(*f.ShutdownGraceS, 24*3600)
		if err != nil {
			return nil, fmt.Errorf("shutdown_grace_s: %w", err)
		}
		c.ShutdownGrace = d
	}
	if f.LedgerRetentionDays != nil {
		if *f.LedgerRetentionDays < 1 || *f.LedgerRetentionDays > 3650 {
			return nil, fmt.Errorf("ledger_retention_days: must be between 1 and 3650, got %d", *f.LedgerRetentionDays)
		}
		c.LedgerRetention = time.Duration(*f.LedgerRetentionDays) * 24 * time.Hour
	}
	names := make([]string, 0, len(f.Webhooks))
	for name := range f.Webhooks {
		names = append(names, name)
	}
	slices.Sort(names) // the first error reported is the same on every run
	for _, name := range names {
		if !shared.ValidSourceName(name) {
			// The cloud has no source by such a name: no webhook could
			// ever reach its handler.
			return nil, fmt.Errorf("webhooks: invalid source name %q: a source's name is the cloud's, %s", name, shared.SourceNameRule)
		}
		s, err := parseSource(f.Webhooks[name], baseDir, checkProgram)
		if err != nil {
			return nil, prefixPath("webhooks."+name, err)
		}
		c.Webhooks[name] = s
	}
	return c, nil
}

// pathError is an error at a key below a source; its message starts with the
// key's path, so callers prefix it with "webhooks.NAME.".
type pathError struct {
	path string
	err  error
}

func (e *pathError) Error() string { return e.path + ": " + e.err.Error() }
func (e *pathError) Unwrap() error { return e.err }

func at(path string, err error) error { return &pathError{path: path, err: err} }

// parseSource validates one source; checkProgram, when set, checks the
// programs of an enabled source's exec handlers.
func parseSource(fs fileSource, baseDir string, checkProgram func(string) error) (Source, error) {
	if !fs.Enabled {
		checkProgram = nil // its handlers never run
	}
	s := Source{Enabled: fs.Enabled, Events: fs.Events, Parallel: fs.Parallel, Provider: fs.Provider}
	if fs.Provider != "" && !summary.Known(fs.Provider) {
		return Source{}, at("provider", fmt.Errorf("unknown payload parser %q (github, stripe, slack or none)", fs.Provider))
	}
	if err := checkEvents("events", fs.Events); err != nil {
		return Source{}, err
	}
	kinds := map[string]bool{}
	for i, fr := range fs.Routes {
		path := fmt.Sprintf("routes[%d]", i)
		if len(fr.Events) == 0 {
			return Source{}, at(path+".events", errors.New(`a route needs its events (["*"] for every event)`))
		}
		if err := checkEvents(path+".events", fr.Events); err != nil {
			return Source{}, err
		}
		if len(fs.Events) > 0 {
			for j, e := range fr.Events {
				if !coveredBy(fs.Events, e) {
					return Source{}, at(fmt.Sprintf("%s.events[%d]", path, j), fmt.Errorf("%q is not in the source's events, so it never arrives", e))
				}
			}
		}
		if !fr.set() {
			return Source{}, at(path, errors.New("a route needs a handler: set forward or exec"))
		}
		h, err := parseHandler(fr.fileHandler, fs.fileHandler, baseDir, true, checkProgram)
		if err != nil {
			return Source{}, prefixPath(path, err)
		}
		kinds[h.Kind()] = true
		s.Routes = append(s.Routes, Route{Events: fr.Events, Handler: h})
	}
	if fs.fileHandler.set() {
		// The source's own options also serve as its routes' defaults, so
		// they need only apply to some handler of the source.
		h, err := parseHandler(fs.fileHandler, fileHandler{}, baseDir, false, checkProgram)
		if err != nil {
			return Source{}, err
		}
		kinds[h.Kind()] = true
		s.Routes = append(s.Routes, Route{Handler: h})
	}
	if err := fs.fileHandler.optionsApply(kinds); err != nil {
		return Source{}, err
	}
	if fs.Enabled && len(s.Routes) == 0 {
		return Source{}, errors.New("enabled but has no handler: set forward, exec or routes")
	}
	return s, nil
}

// prefixPath puts path in front of a pathError's path (or makes one).
func prefixPath(path string, err error) error {
	var pe *pathError
	if errors.As(err, &pe) {
		return &pathError{path: path + "." + pe.path, err: pe.err}
	}
	return at(path, err)
}

// checkEvents validates the event names of the list at path
// (shared.CheckEventFilter).
func checkEvents(path string, events []string) error {
	for i, e := range events {
		if err := shared.CheckEventFilter(e); err != nil {
			return at(fmt.Sprintf("%s[%d]", path, i), err)
		}
	}
	return nil
}

// coveredBy reports whether event e of a route can pass the source's events:
// listed itself, as its type, or under "*".
func coveredBy(sourceEvents []string, e string) bool {
	typ, _, _ := strings.Cut(e, ".")
	return slices.Contains(sourceEvents, "*") || slices.Contains(sourceEvents, e) || slices.Contains(sourceEvents, typ) ||
		slices.ContainsFunc(sourceEvents, func(s string) bool { return strings.HasPrefix(s, e+".") })
}

func seconds(v float64, maxS float64) (time.Duration, error) {
	if v <= 0 || v > maxS {
		return 0, fmt.Errorf("must be more than 0 and at most %v, got %v", maxS, v)
	}
	return time.Duration(v * float64(time.Second)), nil
}
