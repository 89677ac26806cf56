package proxy

import (
	"fmt"

	"github.com/fenceproxy/fenceproxy/internal/logging"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
)

// loginReasons classes the errors a server answers a login with, for
// fenceproxy_login_failures_total{reason} and the log. Only "authentication"
// (a wrong password, an unknown user) is an authentication failure
// (fenceproxy_auth_failures_total): a login refused for its database, its
// host or a limit proved the credentials. Codes not listed are "other".
// MySQL 8's own codes (3118, 3159) are from its documentation: no MySQL 8
// server could be run where this was written.
var loginReasons = map[uint16]string{
	1045: "authentication", // ER_ACCESS_DENIED_ERROR: wrong password, unknown user (or account@host)
	1698: "authentication", // ER_ACCESS_DENIED_NO_PASSWORD_ERROR (unix_socket / auth plugins)
	1044: "database",       // ER_DBACCESS_DENIED_ERROR: no privilege on the database asked for (MariaDB says so for one that does not exist too)
	1049: "database",       // ER_BAD_DB_ERROR: unknown database
	1040: "limit",          // ER_CON_COUNT_ERROR: max_connections
	1203: "limit",          // ER_TOO_MANY_USER_CONNECTIONS: max_user_connections
	1226: "limit",          // ER_USER_LIMIT_REACHED: MAX_CONNECTIONS_PER_HOUR and the like
	1129: "host",           // ER_HOST_IS_BLOCKED: max_connect_errors
	1130: "host",           // ER_HOST_NOT_PRIVILEGED
	1251: "auth_plugin",    // ER_NOT_SUPPORTED_AUTH_MODE
	1524: "auth_plugin",    // ER_PLUGIN_IS_NOT_LOADED
	1820: "password_expired",
	1862: "password_expired", // ER_MUST_CHANGE_PASSWORD_LOGIN
	4151: "account_locked",   // MariaDB ER_ACCOUNT_HAS_BEEN_LOCKED
	3118: "account_locked",   // MySQL ER_ACCOUNT_HAS_BEEN_LOCKED
	3159: "transport",        // MySQL ER_SECURE_TRANSPORT_REQUIRED
}

// LoginFailureReasons are the reason label values of
// fenceproxy_login_failures_total, each initialised at 0.
var LoginFailureReasons = []string{"authentication", "database", "limit", "host", "auth_plugin",
	"password_expired", "account_locked", "transport", "other"}

func loginReason(code uint16) string {
	if r, ok := loginReasons[code]; ok {
		return r
	}
	return "other"
}

// loginError is a login the server refused; its ERR packet went to the
// client as the server sent it.
type loginError struct {
	code   uint16
	state  string
	msg    string
	reason string
}

func (e *loginError) Error() string {
	return fmt.Sprintf("login refused: ERROR %d (%s): %s", e.code, e.state, e.msg)
}

// loginRefused is noteLoginRefused's error, which ends a login.
func (c *clientConn) loginRefused() error { return c.noteLoginRefused(c.user) }

// noteLoginRefused counts a login of user (or a COM_CHANGE_USER to it) refused with the
// backend's ERR in c.authErr, or by the proxy itself (none there: the
// caching_sha2_password bridge's 1045), and logs it (a few lines per
// reason and user, then a count: a client may retry at will) with the
// user, the client, the database asked for and the server's error.
func (c *clientConn) noteLoginRefused(user string) *loginError {
	ae := c.authErr
	c.authErr = wire.ErrInfo{}
	if ae.Code == 0 {
		ae = wire.ErrInfo{Code: erAccessDenied, State: "28000", Msg: "caching_sha2_password: the password was encrypted with a key other than the proxy's"}
	}
	e := &loginError{code: ae.Code, state: ae.State, msg: ae.Msg, reason: loginReason(ae.Code)}
	m := c.p.metrics
	m.loginFailures[loginReasonIndex(e.reason)].Inc()
	if e.reason == "authentication" {
		m.AuthFailures.Inc()
	}
	if c.p.logLimit.Allow(logging.Key{Event: msgLoginFailed, Reason: e.reason, User: user}) {
		args := []any{"user", user, "code", e.code, "sqlstate", e.state, "reason", e.reason, "err", e.msg}
		if c.sess.Schema != "" {
			args = append(args, "schema", c.sess.Schema)
		}
		c.log().Warn(msgLoginFailed, args...)
	}
	return e
}

const msgLoginFailed = "login failed"

func loginReasonIndex(reason string) int {
	for i, r := range LoginFailureReasons {
		if r == reason {
			return i
		}
	}
	return len(LoginFailureReasons) - 1
}
