package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy"
	"github.com/fenceproxy/fenceproxy/proxy/admin"
)

func init() {
	subcommands = append(subcommands, newAdminCommand)
}

const adminLong = `Talk to a running proxy's admin endpoint: its address, token and TLS come
from the proxy's config file (admin, admin_auth, admin_tls).

  status               version, uptime, connections, pause, config file and what is pending
  config               the running configuration (secrets redacted); keys whose value in the
                       file differs are marked "pending reload" (SIGHUP applies them) or
                       "pending restart"
  pause [--hold] [--timeout D]
                       stop accepting connections (and, with --hold, hold every statement at
                       a transaction boundary); /readyz answers 503; --timeout ends the pause
                       by itself
  resume               end the pause
  connections          the client connections
  kill ID...           close client connections (and their backend sessions)

With admin_tls the CLI trusts the system's CAs, the certificates of
admin_tls.cert_file (readable on the proxy's host) and --ca-file.

Exit codes: 0 ok; 1 refused (no such connection, the token refused); 2 usage;
3 the admin endpoint cannot be reached or answered an error.`

type adminFlags struct {
	config, address, tokenFile, caFile string
	timeout                            time.Duration
	json                               bool
}

func newAdminCommand(stdout, _ io.Writer) *cobra.Command {
	af := &adminFlags{}
	cmd := group(&cobra.Command{Use: "admin", Short: "Status, config, pause and connections of a running proxy", Long: adminLong})
	f := cmd.PersistentFlags()
	f.StringVarP(&af.config, "config", "c", "fenceproxy.yaml", "the proxy's config file")
	f.StringVar(&af.address, "address", "", "admin endpoint host:port (default: the config's admin)")
	f.StringVar(&af.tokenFile, "token-file", "", "file holding the admin token (default: the config's admin_auth)")
	f.StringVar(&af.caFile, "ca-file", "", "PEM CA bundle to trust for admin_tls, besides the system's and admin_tls.cert_file")
	f.DurationVar(&af.timeout, "request-timeout", 10*time.Second, "how long to wait for the answer")
	f.BoolVar(&af.json, "json", false, "print the endpoint's JSON as it is")

	run := func(fn func(c *adminClient, args []string) error) func(*cobra.Command, []string) error {
		return func(_ *cobra.Command, args []string) error {
			c, err := af.client()
			if err != nil {
				return err
			}
			return fn(c, args)
		}
	}
	status := &cobra.Command{Use: "status", Short: "Version, uptime, connections, pause and pending config", Args: exactArgs(0, ""),
		RunE: run(func(c *adminClient, _ []string) error {
			body, err := c.do("GET", "/status", nil)
			if err != nil || af.json {
				return printRaw(stdout, body, err)
			}
			var st admin.Status
			if err := json.Unmarshal(body, &st); err != nil {
				return fail(exitDB, "GET /status: %v", err)
			}
			printStatus(stdout, st)
			return nil
		})}
	var pendingOnly bool
	config := &cobra.Command{Use: "config", Short: "The running configuration, pending changes marked", Args: exactArgs(0, ""),
		RunE: run(func(c *adminClient, _ []string) error {
			body, err := c.do("GET", "/config", nil)
			if err != nil || af.json {
				return printRaw(stdout, body, err)
			}
			var v admin.ConfigView
			if err := json.Unmarshal(body, &v); err != nil {
				return fail(exitDB, "GET /config: %v", err)
			}
			printConfig(stdout, v, pendingOnly)
			return nil
		})}
	config.Flags().BoolVar(&pendingOnly, "pending", false, "only the keys whose value in the file differs")
	var hold bool
	var pauseFor time.Duration
	pause := &cobra.Command{Use: "pause [--hold] [--timeout D]", Short: "Stop accepting connections (and hold statements)", Args: exactArgs(0, ""),
		RunE: run(func(c *adminClient, _ []string) error {
			q := url.Values{}
			if hold {
				q.Set("hold", "true")
			}
			if pauseFor > 0 {
				q.Set("timeout", pauseFor.String())
			}
			return c.pauseCall(stdout, "/pause", q, af.json)
		})}
	pause.Flags().BoolVar(&hold, "hold", false, "also hold every statement sent outside a transaction until resume")
	pause.Flags().DurationVar(&pauseFor, "timeout", 0, "resume by itself after this long (default: only resume ends it)")
	resume := &cobra.Command{Use: "resume", Short: "End the pause", Args: exactArgs(0, ""),
		RunE: run(func(c *adminClient, _ []string) error { return c.pauseCall(stdout, "/resume", nil, af.json) })}
	conns := &cobra.Command{Use: "connections", Short: "The client connections", Args: exactArgs(0, ""),
		RunE: run(func(c *adminClient, _ []string) error {
			body, err := c.do("GET", "/connections", nil)
			if err != nil || af.json {
				return printRaw(stdout, body, err)
			}
			var list []proxy.ConnInfo
			sc := bufio.NewScanner(bytes.NewReader(body))
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				var ci proxy.ConnInfo
				if err := json.Unmarshal(sc.Bytes(), &ci); err != nil {
					return fail(exitDB, "GET /connections: %v", err)
				}
				list = append(list, ci)
			}
			printConnections(stdout, list)
			return nil
		})}
	kill := &cobra.Command{Use: "kill ID...", Short: "Close client connections (ids of admin connections)",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErr("want one or more connection ids")
			}
			for _, a := range args {
				if _, err := strconv.ParseUint(a, 10, 64); err != nil {
					return usageErr("connection id %q: want a number (the ID of fenceproxy admin connections)", a)
				}
			}
			return nil
		},
		RunE: run(func(c *adminClient, args []string) error {
			var missing []string
			for _, id := range args {
				if _, err := c.do("DELETE", "/connections/"+id, nil); err != nil {
					var he *httpError
					if errors.As(err, &he) && he.code == http.StatusNotFound {
						missing = append(missing, id)
						continue
					}
					return err
				}
				fmt.Fprintf(stdout, "closed connection %s\n", id)
			}
			switch len(missing) {
			case 0:
				return nil
			case 1:
				return fail(exitRefused, "no connection %s", missing[0])
			}
			return fail(exitRefused, "no connections %s", strings.Join(missing, ", "))
		})}
	cmd.AddCommand(status, config, pause, resume, conns, kill)
	return cmd
}

// adminClient calls one proxy's admin endpoint.
type adminClient struct {
	base  string
	token string
	http  *http.Client
}

func (af *adminFlags) client() (*adminClient, error) {
	cfg, err := policy.Load(af.config)
	if err != nil {
		return nil, configError(err)
	}
	addr := af.address
	if addr == "" {
		addr = cfg.Admin
	}
	if addr == "" {
		return nil, fail(exitRefused, "%s has no admin endpoint (admin: \"\"); give --address", af.config)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, usageErr("admin address %q: %v", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1" // listening on every interface: this host's loopback is one
	}
	c := &adminClient{base: "http://" + net.JoinHostPort(host, port), http: &http.Client{Timeout: af.timeout}}
	if af.tokenFile != "" {
		b, err := os.ReadFile(af.tokenFile)
		if err != nil {
			return nil, fail(exitRefused, "--token-file: %v", err)
		}
		c.token = strings.TrimRight(string(b), "\r\n")
	} else if cfg.AdminAuth.Enabled() {
		if c.token, err = cfg.AdminAuth.Token(); err != nil {
			return nil, fail(exitRefused, "admin_auth: %v", err)
		}
	}
	if cfg.AdminTLS.CertFile != "" {
		roots, err := x509.SystemCertPool()
		if err != nil || roots == nil {
			roots = x509.NewCertPool()
		}
		for _, f := range []string{cfg.AdminTLS.CertFile, af.caFile} {
			if f == "" {
				continue
			}
			pem, err := os.ReadFile(f)
			if err != nil {
				if f == af.caFile {
					return nil, fail(exitRefused, "--ca-file: %v", err)
				}
				continue // not readable here: the system's roots and --ca-file decide
			}
			roots.AppendCertsFromPEM(pem)
		}
		c.base = "https://" + net.JoinHostPort(host, port)
		c.http.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}
	}
	return c, nil
}

// httpError is an answer other than 2xx.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return fmt.Sprintf("%d %s", e.code, e.msg) }

func (c *adminClient) do(method, path string, q url.Values) ([]byte, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.http.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fail(exitDB, "%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fail(exitDB, "%s %s: %v", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		he := &httpError{code: resp.StatusCode, msg: strings.TrimSpace(string(body))}
		switch resp.StatusCode {
		case http.StatusUnauthorized:
			return nil, &exitError{code: exitRefused, err: fmt.Errorf("%s %s: the admin token was refused (admin_auth, --token-file): %w", method, path, he)}
		case http.StatusNotFound:
			return nil, &exitError{code: exitRefused, err: fmt.Errorf("%s %s: %w", method, path, he)}
		}
		return nil, &exitError{code: exitDB, err: fmt.Errorf("%s %s: %w", method, path, he)}
	}
	return body, nil
}

func (c *adminClient) pauseCall(w io.Writer, path string, q url.Values, raw bool) error {
	body, err := c.do("POST", path, q)
	if err != nil || raw {
		return printRaw(w, body, err)
	}
	var st proxy.PauseState
	if err := json.Unmarshal(body, &st); err != nil {
		return fail(exitDB, "POST %s: %v", path, err)
	}
	fmt.Fprintln(w, pauseLine(st))
	return nil
}

func printRaw(w io.Writer, body []byte, err error) error {
	if err != nil {
		return err
	}
	w.Write(body)
	return nil
}

func pauseLine(st proxy.PauseState) string {
	if !st.Paused {
		return "not paused: accepting connections"
	}
	var b strings.Builder
	b.WriteString("paused since " + st.Since.UTC().Format("15:04:05") + " UTC: not accepting connections")
	if st.Hold {
		b.WriteString(", holding statements at transaction boundaries (" + plural(st.Held, "command", "commands") + " held)")
	}
	if st.Until != nil {
		b.WriteString("; resumes by itself at " + st.Until.UTC().Format("15:04:05") + " UTC")
	}
	fmt.Fprintf(&b, "; %s in a transaction", plural(st.InTransaction, "connection", "connections"))
	return b.String()
}

func printStatus(w io.Writer, st admin.Status) {
	fmt.Fprintf(w, "fenceproxy %s, instance %s", termSafe(st.Version), termSafe(st.Instance))
	if st.StartedAt != nil {
		fmt.Fprintf(w, ", up %s", humanDuration(time.Duration(st.UptimeSeconds*float64(time.Second))))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "connections: %d\n", st.Connections)
	if st.Pause != nil {
		fmt.Fprintln(w, pauseLine(*st.Pause))
	}
	if st.Draining {
		fmt.Fprintln(w, "draining: shutting down")
	}
	if v := st.Config; v != nil {
		fmt.Fprintf(w, "config: %s (policy version %d)\n", termSafe(v.File), v.PolicyVersion)
		if v.LastReloadError != "" {
			fmt.Fprintf(w, "last reload failed: %s\n", termSafe(v.LastReloadError))
		}
		if v.FileError != "" {
			fmt.Fprintf(w, "the file does not load now: %s\n", termSafe(v.FileError))
		}
		if len(v.PendingReload) > 0 {
			fmt.Fprintf(w, "pending reload (SIGHUP): %s\n", termSafe(strings.Join(v.PendingReload, ", ")))
		}
		if len(v.PendingRestart) > 0 {
			fmt.Fprintf(w, "pending restart: %s\n", termSafe(strings.Join(v.PendingRestart, ", ")))
		}
	}
}

func printConfig(w io.Writer, v admin.ConfigView, pendingOnly bool) {
	fmt.Fprintf(w, "# %s, policy version %d\n", termSafe(v.File), v.PolicyVersion)
	if v.FileError != "" {
		fmt.Fprintf(w, "# the file does not load now: %s\n", termSafe(v.FileError))
	}
	for _, s := range v.Settings {
		if pendingOnly && s.Pending == "" {
			continue
		}
		line := s.Key + ": " + compactJSON(s.Value)
		if s.Pending != "" {
			line += "    # pending " + s.Pending + ": the file has " + compactJSON(s.File)
		}
		fmt.Fprintln(w, termSafe(line))
	}
}

func compactJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func printConnections(w io.Writer, list []proxy.ConnInfo) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tUSER\tCLIENT\tSCHEMA\tSTATE\tCOMMAND\tSECONDS\tTX\tLEASE\tPROGRAM")
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return termSafe(s)
	}
	for _, c := range list {
		tx := "-"
		if c.InTransaction {
			tx = "yes"
		}
		lease := dash(c.Lease)
		if c.Lease != "" {
			lease += "/" + strconv.FormatUint(c.LeaseToken, 10)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%.1f\t%s\t%s\t%s\n", c.ID, dash(c.User), dash(c.Client), dash(c.Schema),
			c.State, dash(c.Command), c.Seconds, tx, lease, dash(c.Program))
	}
	tw.Flush()
}
