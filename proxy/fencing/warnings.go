package fencing

import "github.com/fenceproxy/fenceproxy/proxy/wire"

// TiDB empties SHOW WARNINGS at every statement but SHOW WARNINGS itself,
// COMMIT included, so the COMMIT of the transaction the proxy wraps around
// an autocommit guarded write would leave the client's next SHOW WARNINGS
// empty where a direct session lists the write's warnings: guardedWrite
// reads SHOW WARNINGS before that COMMIT and has the proxy keep TiDB's
// packets (Responder.KeepWarnings) when the write's OK counted warnings or
// the write failed. What the proxy answers with them: proxy/warnings.go.

// KeptWarnings is TiDB's SHOW WARNINGS response (Packets) and the count
// SHOW COUNT(*) WARNINGS gives: the OK's warning count, which may exceed
// the rows (max_error_count), or the rows after an ERR.
type KeptWarnings struct {
	Packets *wire.Recorded
	Count   uint64
}
