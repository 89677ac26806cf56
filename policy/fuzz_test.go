package policy

import (
	"os"
	"testing"
)

// FuzzParse: Parse never panics, and returns either a config or errors
// that all carry a position.
func FuzzParse(f *testing.F) {
	example, _ := os.ReadFile("../configs/fenceproxy.yaml")
	for _, seed := range []string{
		string(example), "", "{}", "listen: [1, 2\n", "tables:\n  - name: a.b\n  -\n",
		"backend: &b {address: x:1}\nfencing:\n  <<: *b\n", "a: 1\n---\nb: 2\n", "tables: [{name: a.b, lease: !!str 5}]\n",
		"timeouts: {idle: !!binary aGVsbG8=}\n", "max_connections: 0x10\n", "max_connections: 99999999999999999999\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("f.yaml", data)
		if (c == nil) == (err == nil) {
			t.Fatalf("config %v and error %v", c, err)
		}
		if err != nil && len(Errors(err)) == 0 {
			t.Fatalf("error without position: %v", err)
		}
	})
}
