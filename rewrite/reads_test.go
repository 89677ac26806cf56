package rewrite

import (
	"path/filepath"
	"testing"
)

// TestReadsGolden: testdata/reads/*.golden, what the proxy reads of a
// packet besides the decision: Decision.ChangesSchema (the catalog is read
// again after it) and ReadWarningsQuery (SHOW WARNINGS the proxy answers
// itself). A case whose name says "was:" is a text the proxy's former
// scanners read otherwise than the server. The output is two lines:
//
//	changes_schema yes|no
//	warnings none|show|count
func TestReadsGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/reads/*.golden")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, cache := range []bool{false, true} {
		opts := Options{CacheEntries: -1, ShapeEntries: -1}
		if cache {
			opts = Options{CacheEntries: 1024, ShapeEntries: 4096}
		}
		e := New(testPolicy(t), opts)
		for _, path := range files {
			preamble, cases := parseGolden(t, path)
			changed := false
			for _, c := range cases {
				for run := 1; run <= 2; run++ {
					d := decide(e, []byte(c.in), c.srv, c.sess, c.prepare)
					got := "changes_schema " + map[bool]string{true: "yes", false: "no"}[d.ChangesSchema] + "\nwarnings " +
						[]string{"none", "show", "count"}[ReadWarningsQuery([]byte(c.in), c.srv, &c.sess)]
					if got != c.out {
						if *update && !cache {
							c.out, changed = got, true
							continue
						}
						t.Errorf("%s: case %q (caches %v, run %d):\n--- in\n%s\n--- got\n%s\n--- want\n%s",
							filepath.Base(path), c.name, cache, run, c.in, got, c.out)
					}
				}
			}
			if changed {
				writeGolden(t, path, preamble, cases)
			}
		}
	}
}
