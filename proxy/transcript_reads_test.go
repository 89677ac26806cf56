package proxy

import "testing"

var readsCases = []transcriptCase{{
	name: "tidb_show_warnings_as_the_server_reads_it",
	about: `SHOW WARNINGS and SHOW COUNT(*) WARNINGS after a wrapped write are recognised as the server
reads them (the one tokenizer): with comments between and after the words, inside an
executable comment, with spaces inside COUNT( * ) and none before WARNINGS, the proxy answers
from the kept warnings. SHOW COUNT (*) WARNINGS goes to the server (on MariaDB, measured, a
syntax error: COUNT is a keyword only directly before its parenthesis); the script's backend
answers with an error.`,
	backend: "engine: tidb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		setFence(c, "1")
		warn := []string{"Warning", "1264", "Out of range value for column 'v' at row 1"}
		wrappedWrite(c, "INSERT INTO invoices (v) VALUES (1000)", okPkt(1, 5, stInTrans, 1, ""), c.tidbWarnings(stInTrans, warn))
		h.note("answered by the proxy")
		for _, q := range []string{"SHOW /* the write's */ WARNINGS", "SHOW WARNINGS -- after the write", "/*!40000 SHOW WARNINGS */",
			"SHOW COUNT( * ) WARNINGS", "SHOW COUNT(*)WARNINGS"} {
			c.query(q)
			c.response()
		}
		h.note("the server's")
		c.query("SHOW COUNT (*) WARNINGS")
		c.backendGets()
		c.respond(errPkt(1064, "42000", "You have an error in your SQL syntax"))
		c.response()
	},
}}

func TestTranscriptReads(t *testing.T) { runTranscripts(t, readsCases) }
