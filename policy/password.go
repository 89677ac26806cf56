package policy

import (
	"fmt"
	"os"
	"strings"
)

// Password returns the password of the proxy's own backend account (User),
// read now from PasswordEnv or PasswordFile; "" when there is no User. A
// file's trailing newline is not part of the password.
func (b Backend) Password() (string, error) {
	switch {
	case b.User == "":
		return "", nil
	case b.PasswordEnv != "":
		pw, ok := os.LookupEnv(b.PasswordEnv)
		if !ok {
			return "", fmt.Errorf("backend.password_env: environment variable %s is not set", b.PasswordEnv)
		}
		return pw, nil
	case b.PasswordFile != "":
		data, err := os.ReadFile(b.PasswordFile)
		if err != nil {
			return "", fmt.Errorf("backend.password_file: %w", err)
		}
		return strings.TrimRight(string(data), "\r\n"), nil
	}
	return "", fmt.Errorf("backend.user %q has no password_env or password_file", b.User)
}

// Token returns the admin endpoint's bearer token, read now from TokenFile
// or TokenEnv; "" when none is configured. An empty token is an error: it
// would protect nothing.
func (a AdminAuth) Token() (string, error) {
	var tok string
	switch {
	case a.TokenEnv != "":
		v, ok := os.LookupEnv(a.TokenEnv)
		if !ok {
			return "", fmt.Errorf("admin_auth.token_env: environment variable %s is not set", a.TokenEnv)
		}
		tok = v
	case a.TokenFile != "":
		data, err := os.ReadFile(a.TokenFile)
		if err != nil {
			return "", fmt.Errorf("admin_auth.token_file: %w", err)
		}
		tok = strings.TrimRight(string(data), "\r\n")
	default:
		return "", nil
	}
	if strings.TrimSpace(tok) == "" {
		return "", fmt.Errorf("admin_auth: the token is empty")
	}
	return tok, nil
}
