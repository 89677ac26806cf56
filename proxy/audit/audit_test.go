package audit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLogWritesLinesAndKeepsTheLatest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := Open(File{Path: path}, 3)
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
	if err := l.Reopen(File{Path: path}); err != nil {
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
	l, err := Open(File{}, 2)
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

// TestRotationKeepsBoundedBackups writes past max_size_mb several times:
// the file is rotated, at most max_backups old files remain, and no record
// is cut or lost from the files kept.
func TestRotationKeepsBoundedBackups(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	l, err := Open(File{Path: path, MaxSizeMB: 1, MaxBackups: 2}, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// About 4 MiB of records: four rotations.
	detail := strings.Repeat("d", 1000)
	n, prevSize := 0, int64(0)
	for written := 0; written < 4<<20; n++ {
		r := Record{Reason: StaleToken, Table: "app.t", Digest: fmt.Sprint(n), Detail: detail}
		if err := l.Write(r); err != nil {
			t.Fatal(err)
		}
		line, _ := json.Marshal(r)
		written += len(line) + 1
		// Backups are named by the millisecond of their rotation: let the
		// clock move on before the next one can happen, as it always has
		// in production between a megabyte of audit records.
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() < prevSize {
			for ms := time.Now().UnixMilli(); time.Now().UnixMilli() == ms; {
			}
		}
		prevSize = st.Size()
	}
	// lumberjack deletes surplus backups in a goroutine of its own.
	var backups []string
	for deadline := time.Now().Add(10 * time.Second); ; {
		backups, _ = filepath.Glob(filepath.Join(dir, "audit-*.jsonl"))
		if len(backups) <= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(backups) != 2 {
		t.Fatalf("backups %q: want 2 (max_backups) after 4 rotations", backups)
	}
	// Backup names sort by time; then the current file.
	slices.Sort(backups)
	var digests []int
	for _, f := range append(backups, path) {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > 1<<20 {
			t.Errorf("%s: %d bytes, over max_size_mb", f, st.Size())
		}
		for _, line := range readLines(t, f) {
			var r Record
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("%s: a cut line: %v", f, err)
			}
			var d int
			fmt.Sscan(r.Digest, &d)
			digests = append(digests, d)
		}
	}
	// The kept files hold the latest records, in order, without a gap.
	for i, d := range digests {
		if want := n - len(digests) + i; d != want {
			t.Fatalf("record %d of the kept files is #%d, want #%d (of %d written)", i, d, want, n)
		}
	}
}

// TestReopenOnReload: SIGHUP calls Reopen with the reloaded settings. After
// an external move the same settings start a new file; new settings (path,
// rotation) take effect; an unwritable path is an error and the running
// file stays in use.
func TestReopenOnReload(t *testing.T) {
	dir := t.TempDir()
	first := File{Path: filepath.Join(dir, "audit.jsonl"), MaxSizeMB: 1, MaxBackups: 3}
	l, err := Open(first, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	write := func(reason string) {
		t.Helper()
		if err := l.Write(Record{Reason: reason}); err != nil {
			t.Fatal(err)
		}
	}
	write(StaleToken)
	if err := os.Rename(first.Path, first.Path+".moved"); err != nil {
		t.Fatal(err)
	}
	write(Expired) // still the moved file: nothing reopened it yet
	if err := l.Reopen(first); err != nil {
		t.Fatal(err)
	}
	write(OwnerMismatch)

	second := File{Path: filepath.Join(dir, "other.jsonl")} // no rotation
	if err := l.Reopen(second); err != nil {
		t.Fatal(err)
	}
	write(NoFence)
	bad := File{Path: filepath.Join(dir, "missing-dir", "a.jsonl"), MaxSizeMB: 1, MaxBackups: 1}
	if err := l.Reopen(bad); err == nil {
		t.Fatal("Reopen of a path in a missing directory: no error")
	}
	write(Refused)

	for _, c := range []struct {
		file string
		want []string
	}{
		{first.Path + ".moved", []string{StaleToken, Expired}},
		{first.Path, []string{OwnerMismatch}},
		{second.Path, []string{NoFence, Refused}},
	} {
		var got []string
		for _, line := range readLines(t, c.file) {
			var r Record
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatal(err)
			}
			got = append(got, r.Reason)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: reasons %q, want %q", filepath.Base(c.file), got, c.want)
		}
	}
	if st, err := os.Stat(first.Path); err != nil || st.Mode().Perm() != 0o640 {
		t.Errorf("reopened file: %v, mode %v, want 0640", err, st.Mode().Perm())
	}
}

// TestCutFitsColumns: values are cut to a column's width at a character
// boundary, never leaving half a character or invalid UTF-8.
func TestCutFitsColumns(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly", 7, "exactly"},
		{"truncated", 5, "trunc"},
		{"aé", 2, "a"}, // é is 2 bytes: not split
		{"aé", 3, "aé"},
		{"\xffab", 3, "?ab"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := cut(tt.in, tt.n); got != tt.want {
				t.Fatalf("cut(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
			}
		})
	}
}

// TestFilterReasons: a filter accepts every reason the proxy writes (a
// conflict record must be selectable) and refuses others.
func TestFilterReasons(t *testing.T) {
	for _, c := range []struct {
		reason string
		ok     bool
	}{
		{StaleToken, true}, {LeaseMissing, true}, {Refused, true}, {Conflict, true}, {"", true},
		{"deadlock", false}, {"Conflict", false},
	} {
		t.Run(c.reason, func(t *testing.T) {
			f := Filter{Reason: c.reason}
			if err := f.Check(); (err == nil) != c.ok {
				t.Fatalf("Check: %v, want ok=%v", err, c.ok)
			}
			if c.ok && c.reason != "" && (!f.Match(Record{Reason: c.reason}) || f.Match(Record{Reason: StaleToken + "x"})) {
				t.Fatal("Match does not select exactly its reason")
			}
		})
	}
}
