package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// CredentialsFile is the name of the credentials file in the state directory.
const CredentialsFile = "credentials.json"

// Credentials is what `host claim` stores: the host's identity and secret.
type Credentials struct {
	CloudURL       string `json:"cloud_url"`
	HostID         string `json:"host_id"`
	HostCredential string `json:"host_credential"`
}

// ErrNoCredentials is returned when the state directory holds no credentials.
var ErrNoCredentials = errors.New("no credentials: run `host claim` first")

// EnsureStateDir creates the state directory with mode 0700 if it is missing.
// An existing directory is left as it is.
func EnsureStateDir(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	return os.Chmod(dir, 0o700)
}

// WriteCredentials stores c in dir/credentials.json (mode 0600), atomically:
// a reader sees the old file or the new one, never half of one.
func WriteCredentials(dir string, c Credentials) error {
	if err := EnsureStateDir(dir); err != nil {
		return err
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("encode credentials: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".credentials-*.json")
	if err != nil {
		return fmt.Errorf("write credentials: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op once renamed
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("write credentials: %w", err)
	}
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("write credentials: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write credentials: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write credentials: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, CredentialsFile)); err != nil {
		return fmt.Errorf("write credentials: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync() // best effort: make the rename itself durable
		d.Close()
	}
	return nil
}

// ReadCredentials loads dir/credentials.json; ErrNoCredentials if it is absent.
func ReadCredentials(dir string) (Credentials, error) {
	path := filepath.Join(dir, CredentialsFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Credentials{}, fmt.Errorf("%s: %w", path, ErrNoCredentials)
	}
	if err != nil {
		return Credentials{}, fmt.Errorf("read credentials: %w", err)
	}
	var c Credentials
	if err := json.Unmarshal(data, &c); err != nil {
		return Credentials{}, fmt.Errorf("read credentials %s: %w", path, err)
	}
	if c.HostID == "" || c.HostCredential == "" {
		return Credentials{}, fmt.Errorf("read credentials %s: host_id or host_credential missing", path)
	}
	return c, nil
}
