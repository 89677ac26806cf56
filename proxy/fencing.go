package proxy

// fencing is what the proxy does to fence one session's writes, apart from
// the relay and the command dispatch:
//
//   - tracker.go: the per-packet tracker (session effects of statements
//     that succeeded, the 0-row writes whose lease must be checked, the
//     held OK), shadow mode's checks, one-by-one execution of a
//     multi-statement packet;
//   - guard.go: guarded writes (the guard before the write, the proxy's
//     own transaction around an autocommit one, the answer to a rejected
//     guard);
//   - warnings.go: on TiDB, the warnings of an autocommit guarded write,
//     read before the proxy's COMMIT, for the client's SHOW WARNINGS;
//   - verdict.go: the lease check after a 0-row write, and the verdict;
//   - conflict.go: the watch of a transaction that carries a guarded write,
//     and the audit of its engine conflict;
//   - auditrecord.go: audit records, the stale-write metric, refusals.
//
// It reads the session (c.sess, c.status, c.named, c.srv), runs its own
// statements through backendQuery/backendExec, and writes to the client
// only through the exchange (c.x) and the response walker's relayer, whose
// hook the tracker is.
type fencing struct {
	c *clientConn
	// fenced: the open transaction carries a guarded write whose guard
	// passed (TiDB, Galera; see conflict.go), nil otherwise.
	fenced *fencedTxn
}
