package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
)

// A secret given as a flag is in every user's `ps` and in the shell's
// history. Each secret setting can come from the environment instead, and
// these from a file too: its path is no secret.
type secretFile struct {
	flag, env         string // the secret's own setting
	fileFlag, fileEnv string // the file that may hold it instead
	value, file       func(*options) *string
}

var secretFiles = []secretFile{
	{"admin-token", "RELAY_ADMIN_TOKEN", "admin-token-file", "RELAY_ADMIN_TOKEN_FILE",
		func(o *options) *string { return &o.adminToken }, func(o *options) *string { return &o.adminTokenFile }},
	{"jwt-key", "RELAY_JWT_KEY", "jwt-key-file", "RELAY_JWT_KEY_FILE",
		func(o *options) *string { return &o.jwtKey }, func(o *options) *string { return &o.jwtKeyFile }},
}

// registerSecretFiles registers the file form of each secret setting fs
// has.
func (o *options) registerSecretFiles(fs *flag.FlagSet) {
	for _, sf := range secretFiles {
		if fs.Lookup(sf.flag) == nil {
			continue
		}
		fs.StringVar(sf.file(o), sf.fileFlag, env(sf.fileEnv, ""),
			fmt.Sprintf("file holding the value of -%s (a trailing line break is dropped) (%s; instead of %s)", sf.flag, sf.fileEnv, sf.env))
	}
}

// readSecretFiles reads each secret given as a file into its setting,
// after fs.Parse; what goes wrong is said by the file setting's check
// (fileErr).
func (o *options) readSecretFiles(fs *flag.FlagSet) {
	byFlag := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { byFlag[f.Name] = true })
	for _, sf := range secretFiles {
		path := *sf.file(o)
		if fs.Lookup(sf.fileFlag) == nil || path == "" {
			continue
		}
		if _, inEnv := os.LookupEnv(sf.env); inEnv || byFlag[sf.flag] {
			o.setFileErr(sf.fileFlag, fmt.Sprintf("either %s or %s, not both", sf.env, sf.fileEnv))
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			o.setFileErr(sf.fileFlag, "a readable file: "+err.Error())
			continue
		}
		*sf.value(o) = strings.TrimRight(string(b), "\r\n")
	}
}

func (o *options) setFileErr(flag, want string) {
	if o.fileErrs == nil {
		o.fileErrs = map[string]string{}
	}
	o.fileErrs[flag] = want
}

// fileErr is what the file setting flag wants, "" when it is good.
func (o *options) fileErr(flag string) string { return o.fileErrs[flag] }

// secretFlagWarnings are the warnings `cloud` logs for each secret given as
// a flag on the command line (a database URL only when it holds a
// password): the value stays out of the warning.
func secretFlagWarnings(fs *flag.FlagSet) []string {
	var out []string
	fs.Visit(func(f *flag.Flag) {
		var instead string
		switch f.Name {
		case "admin-token":
			instead = "RELAY_ADMIN_TOKEN or -admin-token-file"
		case "jwt-key":
			instead = "RELAY_JWT_KEY or -jwt-key-file"
		case "secret-keys":
			instead = "RELAY_SECRET_KEYS or -secret-keys-file"
		case "database-url":
			u, err := url.Parse(f.Value.String())
			if err != nil || u.User == nil {
				return
			}
			if _, ok := u.User.Password(); !ok {
				return
			}
			instead = "a URL without the password, and PGPASSWORD or a PGPASSFILE for it"
		default:
			return
		}
		out = append(out, fmt.Sprintf("-%s given on the command line: any user of this machine can read it in the process list, and it stays in the shell's history; use %s", f.Name, instead))
	})
	return out
}
