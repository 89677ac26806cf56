package audit

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLogWritesLinesAndKeepsTheLatest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := Open(path, 3)
	if err != nil {
		t.Fatal(err)
	}
	tok := uint64(7)
	for i, reason := range []string{StaleToken, Expired, OwnerMismatch, NoFence, Refused} {
		if err := l.Write(Record{Reason: reason, Table: "app.t", PresentedToken: &tok, Detail: strings.Repeat("x", i)}); err != nil {
			t.Fatal(err)
		}
	}
	recent := l.Recent(10)
	if len(recent) != 3 || recent[0].Reason != OwnerMismatch || recent[2].Reason != Refused {
		t.Fatalf("Recent: want the last 3, oldest first: %+v", recent)
	}
	if got := l.Recent(1); len(got) != 1 || got[0].Reason != Refused {
		t.Fatalf("Recent(1): %+v", got)
	}
	// Log rotation: the file is moved away, Reopen starts a new one.
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := l.Reopen(); err != nil {
		t.Fatal(err)
	}
	l.Write(Record{Reason: LeaseMissing})
	l.Close()

	lines := readLines(t, path+".1")
	if len(lines) != 5 {
		t.Fatalf("rotated file has %d lines", len(lines))
	}
	var first map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"time", "reason", "mode", "lease", "table", "presented_owner", "presented_token",
		"current_token", "client", "user", "schema", "digest"} {
		if _, ok := first[field]; !ok {
			t.Errorf("contract field %q missing from %s", field, lines[0])
		}
	}
	if got := readLines(t, path); len(got) != 1 || !strings.Contains(got[0], LeaseMissing) {
		t.Fatalf("new file after reopen: %q", got)
	}
}

func TestMemoryOnlyLog(t *testing.T) {
	l, err := Open("", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Recent(5)) != 0 {
		t.Fatal("empty log has records")
	}
	l.Write(Record{Reason: NoFence})
	if got := l.Recent(5); len(got) != 1 {
		t.Fatalf("%+v", got)
	}
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}
