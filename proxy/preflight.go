package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"

	"github.com/fenceproxy/fenceproxy/policy"
)

// Preflight reports, all at once, what would stop New or Serve with this
// configuration: addresses that do not resolve, files that do not open or
// hold no usable PEM, an unset password or token variable, an audit file
// that cannot be written. Each problem is a *policy.Error at the key it is
// about. It also takes a config from policy.Check that has problems of its
// own, and skips the keys those are about. It opens nothing it leaves
// behind and creates no file.
func Preflight(cfg *policy.Config) []error {
	var errs []error
	at := func(key, format string, a ...any) {
		if !cfg.Reported(key) {
			errs = append(errs, cfg.ErrorAt(key, fmt.Sprintf(format, a...)))
		}
	}
	for _, a := range []struct{ key, addr string }{{"listen", cfg.Listen}, {"admin", cfg.Admin}, {"backend.address", cfg.Backend.Address}} {
		if a.addr == "" || cfg.Reported(a.key) {
			continue
		}
		if _, err := net.ResolveTCPAddr("tcp", a.addr); err != nil {
			at(a.key, "%q: %v", a.addr, unwrapOp(err))
		}
	}

	// Every file on its own, so that each missing one is named at its key.
	usable := map[string]bool{}
	file := func(key, path string) {
		if path == "" || cfg.Reported(key) {
			return
		}
		if err := readableFile(path); err != nil {
			at(key, "%v", err)
			return
		}
		usable[key] = true
	}
	pair := func(section, cert, key string) {
		file(section+".cert_file", cert)
		file(section+".key_file", key)
		if usable[section+".cert_file"] && usable[section+".key_file"] {
			if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
				at(section+".cert_file", "%s with %s: %v", cert, key, err)
			}
		}
	}
	pair("client_tls", cfg.ClientTLS.CertFile, cfg.ClientTLS.KeyFile)
	if cfg.Backend.TLS != "" && cfg.Backend.TLS != policy.TLSDisabled {
		pair("backend", cfg.Backend.CertFile, cfg.Backend.KeyFile)
		file("backend.ca_file", cfg.Backend.CAFile)
		if usable["backend.ca_file"] {
			if pem, err := os.ReadFile(cfg.Backend.CAFile); err == nil && !x509.NewCertPool().AppendCertsFromPEM(pem) {
				at("backend.ca_file", "%s: no PEM certificate found", cfg.Backend.CAFile)
			}
		}
	}
	if cfg.Backend.User != "" {
		switch {
		case cfg.Backend.PasswordEnv != "":
			if _, ok := os.LookupEnv(cfg.Backend.PasswordEnv); !ok && !cfg.Reported("backend.password_env") {
				at("backend.password_env", "environment variable %s is not set", cfg.Backend.PasswordEnv)
			}
		case cfg.Backend.PasswordFile != "":
			file("backend.password_file", cfg.Backend.PasswordFile)
		}
	}
	if cfg.Admin != "" {
		pair("admin_tls", cfg.AdminTLS.CertFile, cfg.AdminTLS.KeyFile)
		switch {
		case cfg.AdminAuth.TokenEnv != "":
			if _, err := cfg.AdminAuth.Token(); err != nil {
				at("admin_auth.token_env", "%v", trimKey(err, "admin_auth.token_env: "))
			}
		case cfg.AdminAuth.TokenFile != "":
			file("admin_auth.token_file", cfg.AdminAuth.TokenFile)
			if usable["admin_auth.token_file"] {
				if _, err := cfg.AdminAuth.Token(); err != nil {
					at("admin_auth.token_file", "%v", trimKey(err, "admin_auth: "))
				}
			}
		}
	}
	if !cfg.Reported("audit.file") {
		if err := checkWritableFile(cfg.Audit.File); err != nil {
			at("audit.file", "%v", err)
		}
	}
	if !cfg.Reported("listen_socket") {
		if err := checkSocketPath(cfg.ListenSocket); err != nil {
			at("listen_socket", "%v", trimKey(err, "listen_socket "))
		}
	}
	return errs
}

// readableFile: path is a regular file this process can read.
func readableFile(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s: %v", path, unwrapOp(err))
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %v", path, unwrapOp(err))
	}
	f.Close()
	return nil
}

// unwrapOp drops the operation and path an *os.PathError or *net.OpError
// repeats ("stat /x: no such file" -> "no such file").
func unwrapOp(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var de *net.DNSError
	if errors.As(err, &de) {
		return errors.New(de.Err)
	}
	return err
}

func trimKey(err error, prefix string) string {
	s := err.Error()
	if len(s) > len(prefix) && s[:len(prefix)] == prefix {
		return s[len(prefix):]
	}
	return s
}

// checkWritableFile reports why path could not be opened for appending:
// its directory is missing or not writable, or it exists and is not a
// writable regular file.
func checkWritableFile(path string) error {
	if path == "" {
		return nil
	}
	if st, err := os.Stat(path); err == nil {
		if !st.Mode().IsRegular() {
			return fmt.Errorf("%s: not a regular file", path)
		}
		if err := syscall.Access(path, 2 /* W_OK */); err != nil {
			return fmt.Errorf("%s: not writable: %w", path, err)
		}
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s: %v", path, unwrapOp(err))
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("%s: directory %s: %v", path, dir, unwrapOp(err))
	}
	if !st.IsDir() {
		return fmt.Errorf("%s: %s is not a directory", path, dir)
	}
	if err := syscall.Access(dir, 2|1 /* W_OK|X_OK */); err != nil {
		return fmt.Errorf("%s: cannot create files in %s: %w", path, dir, err)
	}
	return nil
}
