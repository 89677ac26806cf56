package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/fenceproxy/fenceproxy/internal/logging"
	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy"
	"github.com/fenceproxy/fenceproxy/proxy/admin"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

func init() {
	subcommands = append(subcommands, newServeCommand, newCheckConfigCommand)
}

func newServeCommand(_, stderr io.Writer) *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "serve [--config FILE]",
		Short: "Run the proxy",
		Long: "serve runs the proxy until SIGTERM or SIGINT (graceful drain), reloading the config on SIGHUP.\n" +
			"Logs go to stderr.",
		Args: exactArgs(0, ""),
		RunE: func(*cobra.Command, []string) error {
			reloader, err := policy.NewReloader(path)
			if err != nil {
				return serveConfigError(path, err)
			}
			cfg := reloader.Current()
			level := new(slog.LevelVar)
			level.Set(logLevel(cfg.LogLevel))
			logger := logging.New(stderr, cfg.LogFormat, level)
			if errs := proxy.Preflight(cfg); len(errs) > 0 {
				if cfg.LogFormat == logging.FormatJSON {
					// Every line of a JSON log is JSON, its last one too.
					for _, e := range errs {
						logger.Error("config refused", "err", e)
					}
					return reported(configError(errors.Join(errs...)))
				}
				return configError(errors.Join(errs...))
			}

			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			if err := serve(ctx, stop, reloader, logger, level); err != nil {
				// Said once, in the log's format; not again on stderr.
				logger.Error("fenceproxy stopped", "err", err)
				return reported(fail(exitRefused, "%v", err))
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&path, "config", "c", "fenceproxy.yaml", "config file")
	return cmd
}

func newCheckConfigCommand(stdout, _ io.Writer) *cobra.Command {
	var connect bool
	cmd := &cobra.Command{
		Use:   "check-config FILE",
		Short: "Validate a config file the way serve would, and exit",
		Long: "check-config reports every problem serve would stop at, all at once, each with its\n" +
			"file:line:column: the file's keys and values, listeners that share an address, addresses,\n" +
			"TLS files, the backend password variable or file, the audit file's directory. With --connect\n" +
			"it also dials the backend and, when backend.user is set, logs in with it and checks what serve\n" +
			"checks at start: every protected table exists (with the closest name for one that does not),\n" +
			"the lease tables exist, and the account can read the schema catalog.\n" +
			"Exit 0 when serve would start, 1 otherwise.",
		Args: exactArgs(1, "one config FILE"),
		RunE: func(_ *cobra.Command, args []string) error {
			return runCheckConfig(stdout, args[0], connect)
		},
	}
	cmd.Flags().BoolVar(&connect, "connect", false, "also dial the backend, log in as backend.user and check the protected tables")
	return cmd
}

// configError prints every problem of a config on its own line.
func configError(err error) error {
	var b strings.Builder
	list := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	}
	for i, e := range list {
		if i > 0 {
			b.WriteString("\n  ")
		}
		b.WriteString(e.Error())
	}
	if len(list) > 1 {
		return fail(exitRefused, "%d problems:\n  %s", len(list), b.String())
	}
	return fail(exitRefused, "%s", b.String())
}

// serve runs the proxy and its admin endpoint until ctx ends (stopSignals
// then restores the default signal handling), reloading the
// configuration on SIGHUP.
func serve(ctx context.Context, stopSignals func(), reloader *policy.Reloader, logger *slog.Logger, level *slog.LevelVar) error {
	if err := protectionChecks(ctx, reloader, logger); err != nil {
		return err
	}
	cfg := reloader.Current()
	started, startedAt := cfg, time.Now() // what restart-only keys keep (GET /config)
	logging.Install(logger)
	applyThreads(cfg, logger)
	reg := prometheus.NewRegistry()
	metrics, reloadOK, reloadTime := registerMetrics(reg)
	reloadOK.Set(1)
	reloadTime.SetToCurrentTime()

	auditLog, err := audit.Open(auditFile(cfg), 1000)
	if err != nil {
		return err
	}
	defer auditLog.Close()

	ln, err := openListeners(cfg)
	if err != nil {
		return err
	}
	// Listening first: the default instance id names the port in use,
	// also when listen asks for any (":0").
	p, err := proxy.New(cfg, reloader.Policy(), proxy.Options{Logger: logger, Metrics: metrics, Audit: auditLog,
		InstanceID: defaultInstanceID(cfg, ln.Addr())})
	if err != nil {
		ln.Close()
		return err
	}
	var adminSrv *http.Server
	var adminTLS *proxy.AdminTLS
	adminAddr := ""
	if cfg.Admin != "" {
		aln, err := net.Listen("tcp", cfg.Admin)
		if err != nil {
			ln.Close()
			return err
		}
		token, err := cfg.AdminAuth.Token()
		if err != nil {
			ln.Close()
			aln.Close()
			return err
		}
		adminTLS, err = proxy.NewAdminTLS(cfg.AdminTLS, metrics, logger)
		if err != nil {
			ln.Close()
			aln.Close()
			return err
		}
		tlsCfg := adminTLS.Config()
		adminSrv = &http.Server{
			Handler: &admin.Handler{Gatherer: reg, Audit: auditLog, Ready: p.Ready, Draining: p.Draining, Sessions: p,
				Token: token, ProtectProbes: cfg.AdminAuth.ProtectProbes, Control: p,
				Config: func() admin.ConfigState {
					return admin.ConfigState{Started: started, Current: reloader.Current(),
						PolicyVersion: reloader.Policy().Version, LastReloadError: reloader.LastError()}
				},
				Version: version, Instance: p.Instance(), Started: startedAt},
			ReadHeaderTimeout: 5 * time.Second,
			TLSConfig:         tlsCfg,
			ErrorLog:          logging.HTTPErrorLog(logger, "admin_http"),
		}
		if tlsCfg != nil {
			aln = tls.NewListener(aln, tlsCfg)
		}
		go adminSrv.Serve(aln)
		adminAddr = aln.Addr().String()
		logger.Info("admin endpoint listening", "admin", adminAddr, "tls", tlsCfg != nil, "token", token != "")
	}
	// Said once both listeners are bound: what it names can be reached.
	tables := make([]string, len(cfg.Tables))
	for i, t := range cfg.Tables {
		tables[i] = t.Name
	}
	auditDest := cfg.Audit.File
	if auditDest == "" {
		auditDest = "(no file: log, metrics and /audit only)"
	}
	logger.Info("fenceproxy listening", "version", version, "config", cfg.Path, "listen", ln.tcpAddr(), "listen_socket", ln.socket(),
		"admin", adminAddr, "backend", cfg.Backend.Address, "protected_tables", strings.Join(tables, ","),
		"mode", cfg.Fencing.Mode, "on_stale", cfg.Fencing.OnStale, "audit", auditDest, "instance", p.Instance())

	notify := func(state ...string) {
		if err := sdNotify(state...); err != nil {
			logger.Warn("telling systemd the proxy's state failed", "state", state[0], "err", err)
		}
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for range hup {
			notify("RELOADING=1")
			restart, err := reloader.Reload()
			// Certificates are read again either way: rotated files at
			// the same paths need no config change.
			p.ReloadCertificates(reloader.Current())
			adminTLS.Reload(reloader.Current().AdminTLS)
			if err != nil {
				reloadOK.Set(0)
				logger.Error("config reload failed; keeping the running config", "err", err)
				notify("READY=1", "STATUS=config reload failed; running the previous config (see the log)")
				continue
			}
			reloadOK.Set(1)
			reloadTime.SetToCurrentTime()
			cfg := reloader.Current()
			applyThreads(cfg, logger)
			p.Update(cfg, reloader.Policy())
			level.Set(logLevel(cfg.LogLevel))
			if err := auditLog.Reopen(auditFile(cfg)); err != nil {
				logger.Error("audit file reopen failed", "err", err)
			}
			logger.Info("config reloaded", "policy_version", reloader.Policy().Version, "protected_tables", len(cfg.Tables))
			notify("READY=1", fmt.Sprintf("STATUS=config reloaded (policy version %d)", reloader.Policy().Version))
			// Every reload says what still waits for a restart, not only
			// the one that changed it.
			if pending := policy.RestartKeys(started, cfg); len(pending) > 0 {
				logger.Warn("changed settings take effect only after a restart", "keys", strings.Join(pending, ","),
					"changed_by_this_reload", strings.Join(restart, ","))
			}
		}
	}()

	serveErr := make(chan error, 2)
	ln.serve(p, serveErr)
	// The listener already queues connections: ready for systemd's
	// After= ordering. Whether the backend answers is /readyz's business.
	notify("READY=1", "STATUS=listening on "+ln.String())
	select {
	case err := <-serveErr:
		if err != nil {
			return err
		}
	case <-ctx.Done():
		stopSignals() // a second SIGTERM or SIGINT ends the process at once
		notify("STOPPING=1")
		p.Drain()
		if delay := reloader.Current().Timeouts.DrainDelay.D(); delay > 0 {
			logger.Info("draining: /readyz answers 503, still accepting clients", "drain_delay", delay)
			select {
			case <-time.After(delay):
			case err := <-serveErr:
				if err != nil {
					return err
				}
			}
		}
	}
	timeout := reloader.Current().Timeouts.Shutdown.D()
	logger.Info("shutting down: draining connections", "deadline", timeout)
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := p.Shutdown(sctx); err != nil {
		logger.Warn("shutdown", "err", err)
	}
	if adminSrv != nil {
		adminSrv.Shutdown(sctx)
	}
	logger.Info("fenceproxy stopped")
	return nil
}

// registerMetrics registers everything /metrics serves with reg. The
// dashboard and alert rules in configs/ are tested against it.
func registerMetrics(reg prometheus.Registerer) (m *proxy.Metrics, reloadOK, reloadTime prometheus.Gauge) {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m = proxy.NewMetrics(reg)
	reloadOK = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fenceproxy_config_last_reload_successful", Help: "Whether the last configuration reload succeeded."})
	reloadTime = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fenceproxy_config_last_reload_success_timestamp_seconds", Help: "Time of the last successful configuration reload."})
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fenceproxy_build_info", Help: "Always 1; the labels say which fenceproxy build runs (revision: the VCS commit it was built from, \"unknown\" without one)."},
		[]string{"version", "goversion", "revision"})
	buildInfo.WithLabelValues(version, runtime.Version(), vcsRevision()).Set(1)
	reg.MustRegister(reloadOK, reloadTime, buildInfo)
	return m, reloadOK, reloadTime
}

// defaultInstanceID is instance_id, else hostname:port of the listener.
func defaultInstanceID(cfg *policy.Config, addr net.Addr) string {
	if cfg.InstanceID != "" {
		return cfg.InstanceID
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	_, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return host
	}
	return host + ":" + port
}

func auditFile(cfg *policy.Config) audit.File {
	return audit.File{Path: cfg.Audit.File, MaxSizeMB: cfg.Audit.MaxSizeMB, MaxBackups: cfg.Audit.MaxBackups}
}

func logLevel(s string) slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return slog.LevelInfo
	}
	return l
}
