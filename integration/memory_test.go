package integration

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbtest"
)

// TestStreamedResultMemory streams a 1 GiB result (1024 rows of 1 MiB)
// through the real fenceproxy binary, in its own process, to a client that
// discards the rows as they come, and checks the proxy's peak resident
// memory (VmHWM): the relay streams, it never holds a result.
func TestStreamedResultMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 1 GiB; skipped in -short mode")
	}
	const (
		rows     = 1024
		rowBytes = 1 << 20
		maxRSS   = 64 << 20
	)
	s := dbtest.Shared(t)
	db := dbtest.NewDatabase(t, s)
	fp := startBinary(t, buildFenceproxy(t), s.Addr, "")
	w := appWire(t, fp.addr, db)
	before := vmHWM(t, fp.cmd.Process.Pid)

	start := time.Now()
	w.opts.Timeout = 5 * time.Minute
	if err := w.send(append([]byte{comQuery}, fmt.Sprintf("SELECT REPEAT('x', %d) FROM seq_1_to_%d", rowBytes, rows)...)); err != nil {
		t.Fatal(err)
	}
	gotRows, gotBytes, err := discardResult(w)
	if err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	if gotRows != rows || gotBytes < rows*rowBytes {
		t.Fatalf("got %d rows, %d bytes", gotRows, gotBytes)
	}
	peak := vmHWM(t, fp.cmd.Process.Pid)
	t.Logf("%d MiB in %v (%.0f MiB/s); proxy VmHWM %d KiB before, %d KiB after",
		gotBytes>>20, elapsed.Round(time.Millisecond), float64(gotBytes>>20)/elapsed.Seconds(), before>>10, peak>>10)
	if peak > maxRSS {
		t.Errorf("proxy peak RSS %d MiB, want under %d MiB", peak>>20, maxRSS>>20)
	}
	stillWorks(t, w)
}

// discardResult reads a text result set (CLIENT_DEPRECATE_EOF) without
// keeping it: the column count, its definitions, then rows until the
// terminator.
func discardResult(w *wireConn) (rows, bytes int, err error) {
	w.deadline()
	var h [5]byte
	next := func() (int, byte, error) {
		if _, err := io.ReadFull(w.r, h[:4]); err != nil {
			return 0, 0, err
		}
		n := int(h[0]) | int(h[1])<<8 | int(h[2])<<16
		if n == 0 {
			return 0, 0, nil
		}
		if _, err := io.ReadFull(w.r, h[4:5]); err != nil {
			return 0, 0, err
		}
		if _, err := io.CopyN(io.Discard, w.r, int64(n-1)); err != nil {
			return 0, 0, err
		}
		return n, h[4], nil
	}
	n, first, err := next()
	if err != nil {
		return 0, 0, err
	}
	if first == 0xff || first == 0 {
		return 0, 0, fmt.Errorf("no result set (first byte %#x)", first)
	}
	for i := 0; i < int(first); i++ {
		if _, _, err := next(); err != nil {
			return 0, 0, err
		}
	}
	for {
		n, first, err = next()
		if err != nil {
			return rows, bytes, err
		}
		switch {
		case first == 0xff:
			return rows, bytes, fmt.Errorf("ERR in the result")
		case first == 0xfe && n < maxPacketLength:
			return rows, bytes, nil
		}
		rows++
		bytes += n
	}
}

// vmHWM is a process's peak resident set size, in bytes.
func vmHWM(t *testing.T, pid int) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}
