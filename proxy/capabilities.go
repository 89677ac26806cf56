package proxy

import (
	"encoding/binary"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// The capability flags between client and server are rebuilt from an
// allow-list: the proxy offers a client only the server's flags it relays
// (capabilityTable), and the handshake response the server receives is
// made anew from the client's flags and that list: its 23 reserved bytes
// are zero, so MariaDB's extended capabilities (bytes 28-31, read by the
// server when the response's CLIENT_MYSQL bit is clear) are always none.
// A flag is relayed only when every packet it changes is one the proxy
// reads correctly, and nothing it changes in the server's reading of a
// statement lets a write escape the fence.

// capability is one of the 32 standard capability flags: whether the
// client's choice reaches the server, and why.
type capability struct {
	name  string
	relay bool
	why   string
}

// capabilities lists every standard flag by bit. docs/protocol.md shows
// the same table (TestProtocolDocListsCapabilities).
var capabilities = [32]capability{
	{"CLIENT_MYSQL (CLIENT_LONG_PASSWORD)", true, "says which dialect the client speaks; toward MariaDB, clear means the extended capability bytes are read, and the proxy sends those as zero"},
	{"CLIENT_FOUND_ROWS", true, "affected rows count matched rows; the proxy reads either kind (its 0-row check asks the server)"},
	{"CLIENT_LONG_FLAG", true, "column flags only"},
	{"CLIENT_CONNECT_WITH_DB", true, "the schema in the handshake, which the proxy tracks"},
	{"CLIENT_NO_SCHEMA", false, "the server then drops the schema from db.table names (measured on MariaDB 10.11: UPDATE nosuch.t wrote the current schema's t), which would let a write name a protected table under another schema"},
	{"CLIENT_COMPRESS", false, "compressed packets: the proxy reads packet framing"},
	{"CLIENT_ODBC", false, "unused by the servers"},
	{"CLIENT_LOCAL_FILES", true, "LOAD DATA LOCAL: the server's file request and the client's file packets are relayed as such"},
	{"CLIENT_IGNORE_SPACE", true, "sets sql_mode IGNORE_SPACE, which SET sql_mode can set as well; the statement reader's business"},
	{"CLIENT_PROTOCOL_41", true, "required: the proxy speaks only protocol 4.1"},
	{"CLIENT_INTERACTIVE", true, "wait_timeout becomes interactive_timeout"},
	{"CLIENT_SSL", false, "negotiated by each hop on its own (client_tls, backend.tls)"},
	{"CLIENT_IGNORE_SIGPIPE", true, "client-side only"},
	{"CLIENT_TRANSACTIONS", true, "status flags in OK packets, which the proxy reads"},
	{"CLIENT_RESERVED", false, "unused by the servers"},
	{"CLIENT_SECURE_CONNECTION", true, "4.1 authentication, which the proxy relays"},
	{"CLIENT_MULTI_STATEMENTS", true, "the proxy runs a packet of several statements only for a session that has it (this flag, then COM_SET_OPTION), as the server does"},
	{"CLIENT_MULTI_RESULTS", true, "several results in one response (CALL): the proxy follows SERVER_MORE_RESULTS_EXISTS"},
	{"CLIENT_PS_MULTI_RESULTS", true, "the same for prepared statements"},
	{"CLIENT_PLUGIN_AUTH", true, "authentication plugins, whose exchange the proxy relays"},
	{"CLIENT_CONNECT_ATTRS", true, "connection attributes, relayed as sent"},
	{"CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA", true, "a longer authentication answer, which the proxy parses"},
	{"CLIENT_CAN_HANDLE_EXPIRED_PASSWORDS", true, "an expired password's sandbox, where the server refuses everything but SET PASSWORD"},
	{"CLIENT_SESSION_TRACK", true, "session state in OK packets: relayed; the proxy's own OK packets carry none"},
	{"CLIENT_DEPRECATE_EOF", true, "OK packets in place of EOF, which the proxy reads either way"},
	{"CLIENT_OPTIONAL_RESULTSET_METADATA", false, "result sets without column definitions: the proxy reads them"},
	{"CLIENT_ZSTD_COMPRESSION_ALGORITHM", false, "compressed packets"},
	{"CLIENT_QUERY_ATTRIBUTES", false, "attributes before the statement text in COM_QUERY and COM_STMT_EXECUTE, which the proxy reads"},
	{"CLIENT_MULTI_FACTOR_AUTHENTICATION", false, "an authentication packet (next factor) the proxy does not relay"},
	{"CLIENT_CAPABILITY_EXTENSION (MariaDB: CLIENT_PROGRESS_OBSOLETE)", false, "MySQL's further flags; MariaDB's old progress reports, packets inside a response"},
	{"CLIENT_SSL_VERIFY_SERVER_CERT", false, "client-side only"},
	{"CLIENT_REMEMBER_OPTIONS", false, "client-side only"},
}

// extendedCapabilities are MariaDB's, bits 32-63 of its capability word,
// in bytes 28-31 of the handshake response. None is relayed: the greeting
// offers none and the response says none.
var extendedCapabilities = []struct {
	bit       uint
	name, why string
}{
	{32, "MARIADB_CLIENT_PROGRESS", "progress report packets inside a response"},
	{33, "MARIADB_CLIENT_RESERVED_1 (COM_MULTI)", "removed from the server"},
	{34, "MARIADB_CLIENT_STMT_BULK_OPERATIONS", "COM_STMT_BULK_EXECUTE, which the proxy refuses (measured: with this flag smuggled, a bulk INSERT of 3 rows ran past the guard)"},
	{35, "MARIADB_CLIENT_EXTENDED_METADATA", "column definitions with a type name, unlike those the proxy writes"},
	{36, "MARIADB_CLIENT_CACHE_METADATA", "COM_STMT_EXECUTE results without column definitions (measured: the response walker waited for definitions that never came)"},
}

// relayedCaps are the flags whose client choice reaches the server.
var relayedCaps = func() uint32 {
	var m uint32
	for bit, c := range capabilities {
		if c.relay {
			m |= 1 << bit
		}
	}
	return m
}()

// responseFixedLen is the fixed start of a HandshakeResponse41 (and the
// whole SSLRequest): capability flags, max packet size, character set and
// 23 reserved bytes.
const responseFixedLen = 32

// rebuildResponse returns a copy of the first n bytes of a client's
// handshake response with its fixed part made anew: caps, the client's max
// packet size and character set, and zeros in the reserved bytes.
func rebuildResponse(raw []byte, n int, caps uint32) []byte {
	out := append([]byte(nil), raw[:n]...)
	binary.LittleEndian.PutUint32(out, caps)
	clear(out[9:responseFixedLen])
	return out
}

// offeredTo is the capability word the proxy shows a client: the server's,
// less what it does not relay, with TLS as the proxy offers it.
func offeredTo(serverCaps uint32, offerTLS bool) uint32 {
	caps := serverCaps & relayedCaps
	if offerTLS {
		caps |= mysql.CLIENT_SSL
	}
	return caps
}
