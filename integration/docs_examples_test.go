package integration

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestStatementFenceDocShowsItsExamples: in docs/statement-fences.md the
// first code block after a link to a file of docs/examples is a verbatim
// part of that file (whole lines), so the code readers copy from the page
// is the code the integration tests run.
func TestStatementFenceDocShowsItsExamples(t *testing.T) {
	const doc = "../docs/statement-fences.md"
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	links := regexp.MustCompile(`\]\((examples/[^)]+)\)`).FindAllStringSubmatchIndex(text, -1)
	if len(links) < 3 {
		t.Fatalf("%s links %d examples, want the Node, Python and Java ones", doc, len(links))
	}
	seen := map[string]bool{}
	for _, m := range links {
		name := text[m[2]:m[3]]
		if seen[name] {
			continue
		}
		seen[name] = true
		t.Run(filepath.Base(name), func(t *testing.T) {
			file, err := os.ReadFile(filepath.Join("../docs", name))
			if err != nil {
				t.Fatal(err)
			}
			rest := text[m[1]:]
			open := strings.Index(rest, "\n```")
			if open < 0 {
				t.Fatalf("no code block after the link to %s", name)
			}
			body := rest[open+4:]
			body = body[strings.Index(body, "\n")+1:] // past the language tag
			end := strings.Index(body, "```")
			if end < 0 {
				t.Fatalf("unterminated code block after the link to %s", name)
			}
			block := body[:end]
			f := "\n" + string(file)
			if block == "" || !strings.Contains(f, "\n"+block) {
				t.Errorf("the code block after the link to %s is not a verbatim part of the file; it reads:\n%s", name, block)
			}
		})
	}
}
