package proxy

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"

	"github.com/fenceproxy/fenceproxy/policy"
)

// Preflight reports, all at once, what would stop New or Serve with this
// (already validated) configuration: addresses that do not resolve, TLS
// material that does not load, an unset password variable or unreadable
// password file, an audit file that cannot be written. It opens nothing it
// leaves behind and creates no file.
func Preflight(cfg *policy.Config) []error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	for _, a := range []struct{ key, addr string }{{"listen", cfg.Listen}, {"admin", cfg.Admin}, {"backend.address", cfg.Backend.Address}} {
		if a.addr == "" {
			continue
		}
		if _, err := net.ResolveTCPAddr("tcp", a.addr); err != nil {
			add(fmt.Errorf("%s %q: %w", a.key, a.addr, err))
		}
	}
	_, err := backendTLSConfig(cfg.Backend)
	add(err)
	_, err = clientTLSConfig(cfg.ClientTLS)
	add(err)
	_, err = cfg.Backend.Password()
	add(err)
	if cfg.Admin != "" {
		_, err = AdminTLSConfig(cfg.AdminTLS)
		add(err)
		_, err = cfg.AdminAuth.Token()
		add(err)
	}
	add(checkWritableFile("audit.file", cfg.Audit.File))
	add(checkSocketPath(cfg.ListenSocket))
	return errs
}

// checkWritableFile reports why path could not be opened for appending:
// its directory is missing or not writable, or it exists and is not a
// writable regular file.
func checkWritableFile(key, path string) error {
	if path == "" {
		return nil
	}
	if st, err := os.Stat(path); err == nil {
		if !st.Mode().IsRegular() {
			return fmt.Errorf("%s %s: not a regular file", key, path)
		}
		if err := syscall.Access(path, 2 /* W_OK */); err != nil {
			return fmt.Errorf("%s %s: not writable: %w", key, path, err)
		}
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s: %w", key, err)
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("%s %s: directory %s: %w", key, path, dir, errors.Unwrap(err))
	}
	if !st.IsDir() {
		return fmt.Errorf("%s %s: %s is not a directory", key, path, dir)
	}
	if err := syscall.Access(dir, 2|1 /* W_OK|X_OK */); err != nil {
		return fmt.Errorf("%s %s: cannot create files in %s: %w", key, path, dir, err)
	}
	return nil
}
