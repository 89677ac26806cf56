package dbserver

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/mysqld"
)

func TestWriteCertsChainVerifies(t *testing.T) {
	c, err := WriteCerts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	server := readCert(t, c.ServerCertFile)
	for _, host := range []string{"127.0.0.1", "localhost", "::1"} {
		if _, err := server.Verify(x509.VerifyOptions{Roots: c.CAPool, DNSName: host}); err != nil {
			t.Errorf("server cert for %s: %v", host, err)
		}
	}
	if _, err := server.Verify(x509.VerifyOptions{Roots: c.CAPool, DNSName: "example.com"}); err == nil {
		t.Error("server cert verifies for example.com")
	}
	client := readCert(t, c.ClientCertFile)
	if _, err := client.Verify(x509.VerifyOptions{Roots: c.CAPool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client cert: %v", err)
	}
	if _, err := tls.LoadX509KeyPair(c.ClientCertFile, c.ClientKeyFile); err != nil {
		t.Error(err)
	}
	if _, err := c.ServerTLS(); err != nil {
		t.Error(err)
	}
}

func TestWriteCertsCustomHosts(t *testing.T) {
	c, err := WriteCerts(t.TempDir(), "proxy.test", "10.1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	server := readCert(t, c.ServerCertFile)
	if len(server.DNSNames) != 1 || server.DNSNames[0] != "proxy.test" || len(server.IPAddresses) != 1 {
		t.Errorf("SANs: %v %v", server.DNSNames, server.IPAddresses)
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s: no PEM", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestFindGaleraNamesWhatToInstall(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	saved, savedDirs := galeraProviders, mysqld.SearchDirs
	galeraProviders, mysqld.SearchDirs = []string{filepath.Join(t.TempDir(), "libgalera_smm.so")}, nil
	defer func() { galeraProviders, mysqld.SearchDirs = saved, savedDirs }()
	_, err := FindGalera()
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "apt-get install mariadb-server galera-4 rsync") ||
		!strings.Contains(err.Error(), "libgalera_smm.so") {
		t.Fatalf("FindGalera() error = %v", err)
	}
}

func TestSetSafeToBootstrap(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "grastate.dat")
	state := "# GALERA saved state\nversion: 2.1\nuuid:    04bda214-ed66-11f1-a0d6-636f8989213d\nseqno:   2\nsafe_to_bootstrap: 1\n"
	if err := os.WriteFile(p, []byte(state), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, safe := range []bool{false, true} {
		if err := setSafeToBootstrap(dir, safe); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(p)
		want := strings.Replace(state, "safe_to_bootstrap: 1", "safe_to_bootstrap: 0", 1)
		if safe {
			want = state
		}
		if string(got) != want {
			t.Errorf("safe=%v: %q", safe, got)
		}
	}
}
