package policy

import (
	"reflect"
	"slices"
	"strings"
)

// Setting is one key of a running configuration, as GET /config shows it.
type Setting struct {
	Key   string `json:"key"`
	Value any    `json:"value"`
	// File is the key's value in the file on disk, when it differs from
	// the running one; Pending says what applies it: "reload" (SIGHUP) or
	// "restart".
	File    any    `json:"file,omitempty"`
	Pending string `json:"pending,omitempty"`
}

// Redacted stands for a secret's value. The config holds none today (the
// proxy's password and the admin token are read from the files and
// variables it names): a key named like a secret is redacted whatever it
// holds, so that a secret added later cannot show by mistake.
const Redacted = "(redacted)"

// Flatten lists every key of c (leaf keys by their path, "backend.tls";
// lists whole: tables, proxy_protocol.trusted_cidrs) in the order of the
// types, with durations as Go duration strings.
func Flatten(c *Config) []Setting {
	var out []Setting
	flatten(&out, "", reflect.ValueOf(c).Elem())
	return out
}

func flatten(out *[]Setting, prefix string, v reflect.Value) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		key := prefix + name
		fv := v.Field(i)
		if fv.Kind() == reflect.Struct {
			flatten(out, key+".", fv)
			continue
		}
		*out = append(*out, Setting{Key: key, Value: redact(key, plain(fv))})
	}
}

// plain is v as JSON shows it: durations as strings, structs of a list as
// maps of their yaml keys.
func plain(v reflect.Value) any {
	switch x := v.Interface().(type) {
	case Duration:
		return x.D().String()
	}
	switch v.Kind() {
	case reflect.Slice:
		if v.IsNil() {
			return []any{}
		}
		items := make([]any, v.Len())
		for i := range items {
			items[i] = plain(v.Index(i))
		}
		return items
	case reflect.Struct:
		m := map[string]any{}
		for name, i := range yamlFields(v.Type()) {
			m[name] = plain(v.Field(i))
		}
		return m
	}
	return v.Interface()
}

func redact(key string, v any) any {
	last := key[strings.LastIndexByte(key, '.')+1:]
	if strings.HasSuffix(last, "_env") || strings.HasSuffix(last, "_file") {
		return v // the name of where a secret is, not the secret
	}
	for _, w := range []string{"password", "token", "secret"} {
		if strings.Contains(last, w) {
			if s, ok := v.(string); ok && s == "" {
				return v
			}
			return Redacted
		}
	}
	return v
}

// Running is the configuration a proxy runs: started is the one it
// started with, current the one the last successful reload installed.
// Keys that apply only at a restart keep started's values; the rest are
// current's. With disk (the file read again now; nil when it did not
// load) each key whose value there differs is marked with what would
// apply it.
func Running(started, current, disk *Config) []Setting {
	run := Flatten(current)
	if changed := restartPrefixes(RestartKeys(started, current)); len(changed) > 0 {
		first := Flatten(started)
		for i := range run {
			if matchesAny(run[i].Key, changed) {
				run[i].Value = first[i].Value
			}
		}
	}
	if disk == nil {
		return run
	}
	restart := restartPrefixes(RestartKeys(started, disk))
	for i, d := range Flatten(disk) {
		if reflect.DeepEqual(run[i].Value, d.Value) {
			continue
		}
		run[i].File = d.Value
		run[i].Pending = "reload"
		if matchesAny(d.Key, restart) {
			run[i].Pending = "restart"
		}
	}
	return run
}

// restartPrefixes turns RestartKeys' names into the keys they stand for:
// turning client or admin TLS on or off (named by its cert_file) stands
// for the whole section.
func restartPrefixes(keys []string) []string {
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		switch k {
		case "client_tls.cert_file", "admin_tls.cert_file":
			out = append(out, strings.TrimSuffix(k, "cert_file"))
		default:
			out = append(out, k)
		}
	}
	return out
}

func matchesAny(key string, keys []string) bool {
	return slices.ContainsFunc(keys, func(k string) bool {
		return key == k || strings.HasSuffix(k, ".") && strings.HasPrefix(key, k)
	})
}
