package proxy

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// docs/protocol.md shows the command table and the capability table as the
// code has them: these render them, and the test requires the page to hold
// them as rendered (paste the block it prints when they differ).

func commandDocTable() string {
	var b strings.Builder
	b.WriteString("| byte | command | the proxy | response |\n| --- | --- | --- | --- |\n")
	for cmd := 0; cmd < 256; cmd++ {
		s := commandTable[cmd]
		switch {
		case s.run != nil:
			fmt.Fprintf(&b, "| 0x%02X | %s | %s | %s |\n", cmd, s.name, s.does, s.response)
		case s.name != "":
			fmt.Fprintf(&b, "| 0x%02X | %s | refused, ERR %d %s: %s | none from the server |\n", cmd, s.name, s.code, s.state, s.why)
		}
	}
	b.WriteString("| any other | | refused, ERR 1047 08S01 (Unknown command) | none from the server |\n")
	return b.String()
}

func capabilityDocTable() string {
	var b strings.Builder
	b.WriteString("| bit | flag | reaches the server | why |\n| --- | --- | --- | --- |\n")
	for bit, c := range capabilities {
		relay := "no"
		if c.relay {
			relay = "as the client sets it"
		}
		if bit == 11 {
			relay = "per hop"
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s |\n", bit, c.name, relay, c.why)
	}
	for _, c := range extendedCapabilities {
		fmt.Fprintf(&b, "| %d | %s | no | %s |\n", c.bit, c.name, c.why)
	}
	return b.String()
}

func TestProtocolDocTables(t *testing.T) {
	doc, err := os.ReadFile("../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	for name, table := range map[string]string{"command": commandDocTable(), "capability": capabilityDocTable()} {
		if !strings.Contains(string(doc), table) {
			t.Errorf("docs/protocol.md does not show the %s table as the code has it; it should read:\n\n%s", name, table)
		}
	}
}
