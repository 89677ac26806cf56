package proxy

// Error codes and states the proxy itself answers with.
const (
	erConCount             = 1040 // ER_CON_COUNT_ERROR: too many connections
	erHandshake            = 1043 // ER_HANDSHAKE_ERROR
	erAccessDenied         = 1045 // ER_ACCESS_DENIED_ERROR
	erNotAllowed           = 1148 // ER_NOT_ALLOWED_COMMAND: statement refused
	erParse                = 1064 // ER_PARSE_ERROR: a statement no row of the statement kinds starts
	erNetPacketTooBig      = 1153 // ER_NET_PACKET_TOO_LARGE
	erNetPacketsOutOfOrder = 1156 // ER_NET_PACKETS_OUT_OF_ORDER
	erSecureTransport      = 3159 // ER_SECURE_TRANSPORT_REQUIRED
	erSignal               = 1644 // ER_SIGNAL_EXCEPTION, what SIGNAL SQLSTATE '45000' gives: a stale write in on_stale: error
	erUnknownComError      = 1047 // ER_UNKNOWN_COM_ERROR
	erQueryInterrupted     = 1317 // ER_QUERY_INTERRUPTED: KILL QUERY met a statement of the proxy's own

	// erBackendLost answers the command in flight when the backend
	// connection broke before any of its response reached the client (in
	// the middle of a command, or after the client sat idle in a
	// transaction): the session, and any open transaction with it, is gone.
	// ER_SERVER_SHUTDOWN, SQLSTATE 08S01 (communication link failure), in
	// MariaDB's and MySQL's ranges alike. Never a 2xxx code (CR_SERVER_LOST
	// 2013 is the client library's own): libmariadb reports a server that
	// sends one as "2027 Received malformed packet" (measured with the
	// mariadb 10.11 client; it shows 1053, 1927, 1158, 1159, 4031 and 9001
	// with their text). go-sql-driver shows "Error 1053 (08S01): ..." and
	// discards the connection on its next use; Node's mysql2 names it
	// ER_SERVER_SHUTDOWN, then reports PROTOCOL_CONNECTION_LOST (fatal)
	// as the proxy closes the connection.
	erBackendLost    = 1053
	stateBackendLost = "08S01"

	// erBackendUnavailable answers a client, in place of the greeting,
	// when the proxy cannot reach the backend or the backend's greeting is
	// unusable. Not 2003 (CR_CONN_HOST_ERROR) or any 2xxx code: those are
	// the client library's own, and libmariadb reports a server that sends
	// one as "Received malformed packet" (2027). 9001 is what ProxySQL
	// sends in the same case.
	erBackendUnavailable = 9001
)

// clientRange reports whether code is in the client libraries' own range
// (CR_*, 2000-2999), which the proxy never sends: a test holds every code
// it answers with against it.
func clientRange(code uint16) bool { return code >= 2000 && code < 3000 }
