package fencing

// Error codes the fencing layer answers with itself (the server's codes it
// reads are defined beside their readers: erConflict, erLockWait,
// erWriteConflict). proxy's TestNoClientRangeErrorCodes holds them against
// the client libraries' range.
const (
	erNotAllowed = 1148 // ER_NOT_ALLOWED_COMMAND: statement refused
	erParse      = 1064 // ER_PARSE_ERROR: a statement no row of the statement kinds starts
	erSignal     = 1644 // ER_SIGNAL_EXCEPTION, what SIGNAL SQLSTATE '45000' gives: a stale write in on_stale: error
)
