// Package wire is the MySQL protocol as the proxy reads and writes it:
// packet I/O over a client's or a backend's connection (Conn, with its
// buffers, raw socket I/O, TLS upgrade and deadlines), the parsers of
// protocol packets (OK, ERR, EOF, length-encoded values), the walker that
// reads a backend's response to each kind of command, and the writing of
// result sets the proxy answers itself.
//
// Its API is closed: nothing outside the package reads a connection's
// buffers or its net.Conn, and every reader of a response goes through the
// walker or the parsers here. The walker reads framing only (headers,
// first bytes, status flags); what becomes of each packet (relayed,
// held, rewritten, read for the proxy itself) is its handler's decision.
package wire
