package policy

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(knowingly(data)), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestReloaderKeepsOldConfigOnABadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fp.yaml")
	writeFile(t, path, "tables:\n  - name: app.runs\n")
	r, err := NewReloader(path)
	if err != nil {
		t.Fatal(err)
	}
	old := r.Current()
	if r.Policy().Version != 1 {
		t.Fatalf("first version %d", r.Policy().Version)
	}

	writeFile(t, path, "tables:\n  - name: runs\n")
	changed, err := r.Reload()
	if err == nil || !strings.HasPrefix(err.Error(), path+":2:11: ") {
		t.Fatalf("Reload of a bad file: %v", err)
	}
	if changed != nil {
		t.Errorf("changed = %v", changed)
	}
	if r.Current() != old || r.Policy().Version != 1 {
		t.Error("a bad reload replaced the config")
	}
	if _, ok := r.Policy().Lookup("app", "runs"); !ok {
		t.Error("old policy lost")
	}
	if r.LastError() == nil {
		t.Error("LastError is nil after a failed reload")
	}

	os.Remove(path)
	if _, err := r.Reload(); err == nil || r.Current() != old {
		t.Errorf("Reload of a missing file: %v", err)
	}
}

func TestReloaderSwapsAndBumpsVersion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fp.yaml")
	writeFile(t, path, "tables:\n  - name: app.runs\n")
	r, err := NewReloader(path)
	if err != nil {
		t.Fatal(err)
	}

	writeFile(t, path, "listen: 127.0.0.1:7000\nbackend: {address: db:3306, tls: required}\nclient_tls: {cert_file: c, key_file: k}\nmax_connections: 10\ntables:\n  - name: app.invoices\n")
	changed, err := r.Reload()
	if err != nil {
		t.Fatal(err)
	}
	// Turning client TLS on is a restart (one key says so); its files
	// alone are read again on every reload.
	want := []string{"listen", "backend.address", "backend.tls", "client_tls.cert_file"}
	if !reflect.DeepEqual(changed, want) {
		t.Errorf("changedNeedsRestart = %v, want %v", changed, want)
	}
	p := r.Policy()
	if p.Version != 2 || r.Current().MaxConnections != 10 || r.LastError() != nil {
		t.Errorf("version %d, config %+v, last error %v", p.Version, r.Current(), r.LastError())
	}
	if _, ok := p.Lookup("app", "runs"); ok {
		t.Error("removed table still protected")
	}
	if _, ok := p.Lookup("app", "invoices"); !ok {
		t.Error("added table not protected")
	}

	// Reloading an unchanged file is still a new version, with nothing to restart.
	changed, err = r.Reload()
	if err != nil || len(changed) != 0 || r.Policy().Version != 3 {
		t.Errorf("unchanged reload: %v %v version %d", changed, err, r.Policy().Version)
	}
}

func TestReloaderConcurrentReaders(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fp.yaml")
	writeFile(t, path, "tables:\n  - name: app.runs\n")
	r, err := NewReloader(path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, ok := r.Policy().Lookup("app", "runs"); !ok || r.Current() == nil {
					t.Error("reader saw no config")
					return
				}
			}
		})
	}
	for range 50 {
		if _, err := r.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if v := r.Policy().Version; v != 51 {
		t.Errorf("version %d after 50 reloads", v)
	}
}

func TestNewReloaderBadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fp.yaml")
	writeFile(t, path, "mode: x\n")
	if _, err := NewReloader(path); err == nil || !strings.Contains(err.Error(), `unknown key "mode"`) {
		t.Fatalf("got %v", err)
	}
}

// TestCertificateFilesReload: new paths for TLS files that stay on, the
// client TLS minimum version and proxy_protocol need no restart.
func TestCertificateFilesReload(t *testing.T) {
	base := "backend: {address: db:3306, tls: verify-ca, ca_file: %s}\nclient_tls: {cert_file: %s, key_file: k}\nadmin_tls: {cert_file: %s, key_file: k}\n"
	old, err := Parse("/f.yaml", []byte(fmt.Sprintf(base, "ca1", "c1", "a1")))
	if err != nil {
		t.Fatal(err)
	}
	new, err := Parse("/f.yaml", []byte(fmt.Sprintf(base, "ca2", "c2", "a2")+"proxy_protocol: {trusted_cidrs: [10.0.0.0/8]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := RestartKeys(old, new); len(got) != 0 {
		t.Errorf("restart keys %v", got)
	}
	off, err := Parse("/f.yaml", []byte("backend: {address: db:3306}\n"))
	if err != nil {
		t.Fatal(err)
	}
	// Turning TLS off is a restart; the files it no longer reads are not.
	want := []string{"backend.tls", "client_tls.cert_file", "admin_tls.cert_file"}
	if got := RestartKeys(old, off); !reflect.DeepEqual(got, want) {
		t.Errorf("restart keys %v, want %v", got, want)
	}
}
