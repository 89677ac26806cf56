package policy

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"
)

// decoder maps a YAML AST onto the config structs by their yaml tags. It is
// ours rather than go-yaml's Decoder because a config error report must
// list every problem of the file, each with its position, and semantic
// checks must point at keys by path; go-yaml stops at the first error and
// keeps no positions. go-yaml still does the YAML itself (parser, AST).
type decoder struct {
	file    string
	errs    []*Error
	seen    map[string]ast.Node // key path ("backend.tls", "tables[1].name") -> its non-null value
	keys    map[string]*token.Token
	anchors map[string]ast.Node
	bad     map[string]bool // key paths whose value could not be decoded
	failed  map[string]bool // key paths a rule was reported at
}

func newDecoder(file string) *decoder {
	return &decoder{
		file:    file,
		seen:    map[string]ast.Node{},
		keys:    map[string]*token.Token{},
		anchors: map[string]ast.Node{},
		bad:     map[string]bool{},
		failed:  map[string]bool{},
	}
}

// failAt records a problem at a token.
func (d *decoder) failAt(tk *token.Token, reason string) {
	e := &Error{File: d.file, Line: 1, Column: 1, Reason: reason}
	if tk != nil && tk.Position != nil {
		e.Line, e.Column = tk.Position.Line, tk.Position.Column
	}
	d.errs = append(d.errs, e)
}

// fail records a problem about the key at path: at its value if the file
// has it, else at the nearest enclosing key that it has. Nothing more is
// said about a key whose value did not even decode.
func (d *decoder) fail(path, reason string) {
	for p := path; p != ""; p = parent(p) {
		if d.bad[p] {
			return
		}
	}
	d.failed[path] = true
	d.failAt(d.pos(path), path+": "+reason)
}

// reported tells whether a problem was already reported at the key at
// path, or at a key enclosing it, or its value (or an enclosing one) did
// not decode.
func (d *decoder) reported(path string) bool {
	for p := path; p != ""; p = parent(p) {
		if d.bad[p] || d.failed[p] {
			return true
		}
	}
	return false
}

// failValue records that the value at path cannot be decoded.
func (d *decoder) failValue(path string, tk *token.Token, reason string) {
	d.bad[path] = true
	d.failAt(tk, reason)
}

// pos is the position of the key at path: its value, else its key, else
// the nearest enclosing key in the file.
func (d *decoder) pos(path string) *token.Token {
	for p := path; p != ""; p = parent(p) {
		if n, ok := d.seen[p]; ok {
			return valueToken(n)
		}
		if tk, ok := d.keys[p]; ok {
			return tk
		}
	}
	return nil
}

// line is the line of the key at path (as pos), or 0.
func (d *decoder) line(path string) int {
	if tk := d.pos(path); tk != nil && tk.Position != nil {
		return tk.Position.Line
	}
	return 0
}

// has reports whether the file sets the key at path to a non-null value.
func (d *decoder) has(path string) bool {
	_, ok := d.seen[path]
	return ok
}

// parent: "tables[1].name" -> "tables[1]" -> "tables" -> "".
func parent(path string) string {
	if i := strings.LastIndexAny(path, ".["); i >= 0 {
		return path[:i]
	}
	return ""
}

// valueToken is where a value starts: for a block mapping or sequence, its
// first entry.
func valueToken(n ast.Node) *token.Token {
	switch v := n.(type) {
	case *ast.MappingNode:
		if len(v.Values) > 0 {
			return v.Values[0].Key.GetToken()
		}
	case *ast.SequenceNode:
		if len(v.Values) > 0 {
			return valueToken(v.Values[0])
		}
	}
	return n.GetToken()
}

// resolve follows anchors, aliases and tags to the node that holds the value.
func (d *decoder) resolve(n ast.Node) ast.Node {
	for {
		switch v := n.(type) {
		case *ast.AnchorNode:
			d.anchors[v.Name.GetToken().Value] = v.Value
			n = v.Value
		case *ast.AliasNode:
			target, ok := d.anchors[v.Value.GetToken().Value]
			if !ok {
				return n // the parser rejects unknown aliases; be safe anyway
			}
			n = target
		case *ast.TagNode:
			n = v.Value
		default:
			return n
		}
	}
}

var durationType = reflect.TypeFor[Duration]()

// value decodes node into v, the field at path.
func (d *decoder) value(path string, node ast.Node, v reflect.Value) {
	node = d.resolve(node)
	if _, isNull := node.(*ast.NullNode); node == nil || isNull {
		return // as if absent: defaults apply
	}
	if path != "" {
		d.seen[path] = node
	}
	tk := node.GetToken()
	if v.Type() == durationType {
		// Only a string: a bare number has no unit to read it in.
		s, ok := scalarText(node)
		if !ok {
			d.failValue(path, tk, fmt.Sprintf("%s: expected a duration such as \"5s\", not %s", path, describe(node)))
			return
		}
		if _, isString := node.(*ast.StringNode); !isString {
			d.failValue(path, tk, fmt.Sprintf("%s: %s is not a duration: write it with a unit, such as \"5s\" or \"0s\"", path, s))
			return
		}
		if err := v.Addr().Interface().(*Duration).UnmarshalText([]byte(s)); err != nil {
			d.failValue(path, tk, path+": "+err.Error())
		}
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		d.mapping(path, node, v)
	case reflect.Slice:
		d.sequence(path, node, v)
	case reflect.String:
		s, ok := scalarText(node)
		if !ok {
			d.failValue(path, tk, fmt.Sprintf("%s: expected a string, not %s", path, describe(node)))
			return
		}
		v.SetString(s)
	case reflect.Int:
		i, ok := intValue(node)
		if !ok {
			d.failValue(path, tk, fmt.Sprintf("%s: expected an integer, not %s", path, describe(node)))
			return
		}
		v.SetInt(i)
	case reflect.Bool:
		b, ok := node.(*ast.BoolNode)
		if !ok {
			d.failValue(path, tk, fmt.Sprintf("%s: expected true or false, not %s", path, describe(node)))
			return
		}
		v.SetBool(b.Value)
	default:
		panic("policy: no decoding for " + v.Type().String())
	}
}

// mapping decodes a YAML mapping into the struct v, reporting unknown and
// duplicate keys.
func (d *decoder) mapping(path string, node ast.Node, v reflect.Value) {
	m, ok := node.(*ast.MappingNode)
	if !ok {
		where := path
		if where == "" {
			where = "the file"
		}
		d.failValue(path, node.GetToken(), fmt.Sprintf("%s: expected a mapping of keys, not %s", where, describe(node)))
		return
	}
	fields := yamlFields(v.Type())
	first := map[string]*token.Token{}
	for _, mv := range m.Values {
		keyTk := mv.Key.GetToken()
		if _, merge := mv.Key.(*ast.MergeKeyNode); merge {
			d.failAt(keyTk, "merge keys (<<) are not supported: repeat the keys")
			continue
		}
		name := keyTk.Value
		sub := name
		if path != "" {
			sub = path + "." + name
		}
		if prev, dup := first[name]; dup {
			d.failAt(keyTk, fmt.Sprintf("%s: duplicate key (first at line %d)", sub, prev.Position.Line))
			continue
		}
		first[name] = keyTk
		i, known := fields[name]
		if !known {
			d.failAt(keyTk, fmt.Sprintf("unknown key %q%s (known: %s)", name, in(path), knownKeys(fields)))
			continue
		}
		d.keys[sub] = keyTk
		d.value(sub, mv.Value, v.Field(i))
	}
}

// sequence decodes a YAML sequence into the slice v.
func (d *decoder) sequence(path string, node ast.Node, v reflect.Value) {
	s, ok := node.(*ast.SequenceNode)
	if !ok {
		d.failValue(path, node.GetToken(), fmt.Sprintf("%s: expected a list, not %s", path, describe(node)))
		return
	}
	v.Set(reflect.MakeSlice(v.Type(), len(s.Values), len(s.Values)))
	for i, elem := range s.Values {
		sub := fmt.Sprintf("%s[%d]", path, i)
		if i < len(s.Entries) && s.Entries[i].Start != nil {
			d.keys[sub] = s.Entries[i].Start // the "-": where an empty entry is
		}
		d.value(sub, elem, v.Index(i))
	}
}

// intValue is the value of an integer node that fits an int.
func intValue(n ast.Node) (int64, bool) {
	in, ok := n.(*ast.IntegerNode)
	if !ok {
		return 0, false
	}
	switch x := in.Value.(type) {
	case int64:
		return x, x >= math.MinInt && x <= math.MaxInt
	case uint64:
		return int64(x), x <= math.MaxInt
	}
	return 0, false
}

// yamlFields maps the yaml key of each decodable field of t to its index.
func yamlFields(t reflect.Type) map[string]int {
	fields := map[string]int{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		fields[name] = i
	}
	return fields
}

func knownKeys(fields map[string]int) string {
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func in(path string) string {
	if path == "" {
		return ""
	}
	return " in " + path
}

// scalarText is the text of a scalar as written (a number stays "1.20",
// not 1.2), or false for a mapping or list.
func scalarText(n ast.Node) (string, bool) {
	switch v := n.(type) {
	case *ast.StringNode:
		return v.Value, true
	case *ast.LiteralNode:
		return v.Value.Value, true
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.InfinityNode, *ast.NanNode:
		return n.GetToken().Value, true
	}
	return "", false
}

func kind(n ast.Node) string {
	switch n.(type) {
	case *ast.MappingNode:
		return "mapping"
	case *ast.SequenceNode:
		return "list"
	}
	return n.Type().String()
}

// describe says what a node is, for "expected X, not Y" messages.
func describe(n ast.Node) string {
	if s, ok := scalarText(n); ok {
		return fmt.Sprintf("%q", s)
	}
	return "a " + kind(n)
}
