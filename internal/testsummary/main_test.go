package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestSummary(t *testing.T) {
	const m = "github.com/fenceproxy/fenceproxy/"
	events := []event{
		{Action: "build-output", ImportPath: m + "broken [" + m + "broken.test]", Output: "broken/x.go:1:1: syntax error\n"},
		{Action: "build-fail", ImportPath: m + "broken [" + m + "broken.test]"},
		{Action: "run", Package: m + "lease", Test: "TestUnit"},
		{Action: "pass", Package: m + "lease", Test: "TestUnit"},
		{Action: "run", Package: m + "lease", Test: "TestStore"},
		{Action: "output", Package: m + "lease", Test: "TestStore", Output: "=== RUN   TestStore\n"},
		{Action: "output", Package: m + "lease", Test: "TestStore", Output: "    main_test.go:30: integration-tier test: no database server in this tier: FENCEPROXY_TEST_TIER=unit (make unit)\n"},
		{Action: "output", Package: m + "lease", Test: "TestStore", Output: "--- SKIP: TestStore (0.00s)\n"},
		{Action: "skip", Package: m + "lease", Test: "TestStore"},
		{Action: "output", Package: m + "lease", Output: "PASS\n"},
		{Action: "output", Package: m + "lease", Output: "ok  \t" + m + "lease\t0.01s\n"},
		{Action: "pass", Package: m + "lease"},
		{Action: "run", Package: m + "cmd/fenceproxy", Test: "TestSystemdUnitVerifies"},
		{Action: "output", Package: m + "cmd/fenceproxy", Test: "TestSystemdUnitVerifies", Output: "    unit_test.go:20: systemd-analyze not installed\n"},
		{Action: "skip", Package: m + "cmd/fenceproxy", Test: "TestSystemdUnitVerifies"},
		{Action: "run", Package: m + "cmd/fenceproxy", Test: "TestBroken"},
		{Action: "output", Package: m + "cmd/fenceproxy", Test: "TestBroken", Output: "    x_test.go:9: want 1, got 2\n"},
		{Action: "fail", Package: m + "cmd/fenceproxy", Test: "TestBroken"},
		{Action: "fail", Package: m + "cmd/fenceproxy"},
		{Action: "skip", Package: m + "configs"},
	}
	var out strings.Builder
	s := newSummary(&out)
	for _, e := range events {
		// Through JSON, as go test writes them.
		b, _ := json.Marshal(e)
		var back event
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		s.add(back)
	}
	s.finish()
	got := out.String()
	for _, want := range []string{
		"broken/x.go:1:1: syntax error\n",
		"ok   " + m + "lease (1 passed, 1 skipped)\n",
		"    x_test.go:9: want 1, got 2\n",
		"FAIL " + m + "cmd/fenceproxy (0 passed, 1 skipped, 1 FAILED)\n",
		"1 tests passed, 1 failed, 2 skipped\n",
		"skipped: 1 tests that need a database server (integration tier: make test runs them):\n      1  lease\n",
		"skipped for other reasons: 1\n  cmd/fenceproxy TestSystemdUnitVerifies: systemd-analyze not installed\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{"PASS\n", "configs", "ok  \t"} {
		if strings.Contains(got, unwanted) {
			t.Errorf("summary has %q:\n%s", unwanted, got)
		}
	}
	if !s.failed {
		t.Error("a failed test and a failed build did not fail the summary")
	}
}
