package policy

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// Load reads, decodes and validates the config file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(path, data)
}

// Parse decodes and validates a config file's contents; path names it in
// errors and anchors relative file paths in it (see resolvePaths). Unknown
// keys are errors; absent keys get their defaults. All problems of the file
// are returned at once, each as an *Error "FILE:LINE:COL: reason".
func Parse(path string, data []byte) (*Config, error) {
	c, err := Check(path, data)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Check is Parse that also returns what it could decode of a file with
// problems (nil only when the file is not YAML at all), so that
// check-config can go on to check files, addresses and the backend in the
// same run: keys with a problem of their own are marked (Reported), and
// the config must not be used for anything else.
func Check(path string, data []byte) (*Config, error) {
	d := newDecoder(path)
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // a BOM some editors write
	// Duplicate keys are left to the decoder, which reports them together
	// with every other problem instead of stopping the parse.
	file, err := parser.ParseBytes(data, 0, parser.AllowDuplicateMapKey())
	if err != nil {
		d.syntaxError(err)
		return nil, joinSorted(d.errs)
	}
	c := &Config{Path: path}
	var body ast.Node
	for _, doc := range file.Docs {
		if doc.Body == nil {
			continue
		}
		if _, comment := doc.Body.(*ast.CommentGroupNode); comment {
			continue
		}
		if body != nil {
			tk := doc.Start // the "---"
			if tk == nil {
				tk = doc.Body.GetToken()
			}
			d.failAt(tk, "only one YAML document is allowed in a config file")
			break
		}
		body = doc.Body
	}
	if body != nil {
		d.value("", body, reflect.ValueOf(c).Elem())
	}
	c.dec = d
	c.fillDefaults(d)
	c.validate(d)
	c.resolvePaths()
	if len(d.errs) > 0 {
		return c, joinSorted(d.errs)
	}
	if c.policy, err = NewPolicy(0, c.Fencing, c.Tables); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err) // unreachable: validate applies the same rules
	}
	return c, nil
}

// syntaxError records a go-yaml parse error at its position.
func (d *decoder) syntaxError(err error) {
	var ye yaml.Error
	if errors.As(err, &ye) {
		d.failAt(ye.GetToken(), ye.GetMessage())
		return
	}
	d.failAt(nil, err.Error())
}

// resolvePaths makes the file paths in the config relative to the config
// file's directory, as Prometheus does, so that a config and its
// certificates can be moved together and the proxy's working directory does
// not matter.
func (c *Config) resolvePaths() {
	dir := filepath.Dir(c.Path)
	for _, p := range []*string{
		&c.ClientTLS.CertFile, &c.ClientTLS.KeyFile,
		&c.Backend.CAFile, &c.Backend.CertFile, &c.Backend.KeyFile, &c.Backend.PasswordFile,
		&c.Audit.File, &c.AdminAuth.TokenFile, &c.AdminTLS.CertFile, &c.AdminTLS.KeyFile,
		&c.ListenSocket,
	} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
}
