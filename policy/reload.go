package policy

import (
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
)

// Reloader holds the current config of a file and replaces it on Reload
// (on SIGHUP, say). Readers call Current or Policy on every use and never
// see a half-applied config: a reload swaps one pointer.
type Reloader struct {
	path string

	mu      sync.Mutex // serialises Reload
	cur     atomic.Pointer[snapshot]
	lastErr atomic.Pointer[error]
	check   func(*Config) error // SetCheck's; nil: none
}

// SetCheck makes Reload refuse a file that loads but that check rejects
// (a protected table the backend does not have): the running config then
// stays, as for a file with errors. Call it before the first Reload.
func (r *Reloader) SetCheck(check func(*Config) error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.check = check
}

type snapshot struct {
	config *Config
	policy *Policy
}

// NewReloader loads path; its policy has version 1.
func NewReloader(path string) (*Reloader, error) {
	c, err := Load(path)
	if err != nil {
		return nil, err
	}
	r := &Reloader{path: path}
	r.cur.Store(&snapshot{config: c, policy: c.Policy(1)})
	return r, nil
}

// Current returns the config in effect.
func (r *Reloader) Current() *Config { return r.cur.Load().config }

// Policy returns the fencing policy in effect; its Version goes up by one
// on every successful Reload.
func (r *Reloader) Policy() *Policy { return r.cur.Load().policy }

// LastError is the error of the latest Reload, nil if it succeeded (or
// there was none yet): for /readyz or a metric.
func (r *Reloader) LastError() error {
	if p := r.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Reload reads the file again. If it does not load, the current config
// stays in effect and the error says why. Otherwise the new config replaces
// it, with the policy version one higher, and changedNeedsRestart lists the
// changed keys that a running proxy cannot apply (see RestartKeys).
func (r *Reloader) Reload() (changedNeedsRestart []string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := Load(r.path)
	if err == nil && r.check != nil {
		err = r.check(c)
	}
	r.lastErr.Store(&err)
	if err != nil {
		return nil, err
	}
	old := r.cur.Load()
	r.cur.Store(&snapshot{config: c, policy: c.Policy(old.policy.Version + 1)})
	return RestartKeys(old.config, c), nil
}

// RestartKeys lists the keys that differ between two configs and take
// effect only when the proxy restarts: the listening addresses and socket,
// everything about the backend but its TLS files (open connections keep
// theirs), turning client or admin TLS on or off, the admin endpoint's
// token, the instance id and the audit table's queue size. Everything else
// (fencing, tables, audit, limits, timeouts, logging, TLS certificate
// files, client_tls.required and min_version, proxy_protocol) applies to
// the next statement, connection or TLS handshake.
func RestartKeys(old, new *Config) []string {
	var changed []string
	if old.Listen != new.Listen {
		changed = append(changed, "listen")
	}
	if old.Admin != new.Admin {
		changed = append(changed, "admin")
	}
	if old.ListenSocket != new.ListenSocket {
		changed = append(changed, "listen_socket")
	}
	if old.ListenSocketMode != new.ListenSocketMode {
		changed = append(changed, "listen_socket_mode")
	}
	// TLS files are read again on every reload (certificate rotation);
	// turning TLS on or off is a restart.
	reloadedFiles := []string{"backend.ca_file", "backend.cert_file", "backend.key_file"}
	for _, k := range changedFields("backend", old.Backend, new.Backend) {
		if !slices.Contains(reloadedFiles, k) {
			changed = append(changed, k)
		}
	}
	if old.ClientTLS.Enabled() != new.ClientTLS.Enabled() {
		changed = append(changed, "client_tls.cert_file")
	}
	changed = append(changed, changedFields("admin_auth", old.AdminAuth, new.AdminAuth)...)
	if (old.AdminTLS.CertFile != "") != (new.AdminTLS.CertFile != "") {
		changed = append(changed, "admin_tls.cert_file")
	}
	if old.InstanceID != new.InstanceID {
		changed = append(changed, "instance_id")
	}
	if old.Audit.QueueSize != new.Audit.QueueSize {
		changed = append(changed, "audit.queue_size")
	}
	return changed
}

// changedFields names the yaml keys of struct fields that differ.
func changedFields(section string, old, new any) []string {
	a, b := reflect.ValueOf(old), reflect.ValueOf(new)
	var changed []string
	for name, i := range yamlFields(a.Type()) {
		if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			changed = append(changed, section+"."+name)
		}
	}
	slices.Sort(changed)
	return changed
}
