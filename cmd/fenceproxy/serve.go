package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy"
	"github.com/fenceproxy/fenceproxy/proxy/admin"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

func init() {
	commands["serve"] = command{"run the proxy", runServe}
	commands["check-config"] = command{"validate a config file and exit", runCheckConfig}
}

func runCheckConfig(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check-config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, "usage: fenceproxy check-config FILE") }
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	cfg, err := policy.Load(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok (%d protected tables, mode %s, on_stale %s)\n",
		fs.Arg(0), len(cfg.Tables), cfg.Fencing.Mode, cfg.Fencing.OnStale)
	return 0
}

func runServe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "fenceproxy.yaml", "config file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	reloader, err := policy.NewReloader(*path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	cfg := reloader.Current()
	level := new(slog.LevelVar)
	level.Set(logLevel(cfg.LogLevel))
	logger := newLogger(stderr, cfg.LogFormat, level)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := serve(ctx, reloader, logger, level); err != nil {
		logger.Error("fenceproxy stopped", "err", err)
		return 1
	}
	return 0
}

// serve runs the proxy and its admin endpoint until ctx ends, reloading the
// configuration on SIGHUP.
func serve(ctx context.Context, reloader *policy.Reloader, logger *slog.Logger, level *slog.LevelVar) error {
	cfg := reloader.Current()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := proxy.NewMetrics(reg)
	reloadOK := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fenceproxy_config_last_reload_successful", Help: "Whether the last configuration reload succeeded."})
	reloadTime := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fenceproxy_config_last_reload_success_timestamp_seconds", Help: "Time of the last successful configuration reload."})
	reg.MustRegister(reloadOK, reloadTime)
	reloadOK.Set(1)
	reloadTime.SetToCurrentTime()

	auditLog, err := audit.Open(cfg.Audit.File, 1000)
	if err != nil {
		return err
	}
	defer auditLog.Close()

	p, err := proxy.New(cfg, reloader.Policy(), proxy.Options{Logger: logger, Metrics: metrics, Audit: auditLog})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	logger.Info("fenceproxy listening", "listen", ln.Addr().String(), "backend", cfg.Backend.Address,
		"protected_tables", len(cfg.Tables), "mode", cfg.Fencing.Mode, "on_stale", cfg.Fencing.OnStale)

	var adminSrv *http.Server
	if cfg.Admin != "" {
		aln, err := net.Listen("tcp", cfg.Admin)
		if err != nil {
			ln.Close()
			return err
		}
		adminSrv = &http.Server{
			Handler:           &admin.Handler{Gatherer: reg, Audit: auditLog, Ready: p.Ready},
			ReadHeaderTimeout: 5 * time.Second,
		}
		go adminSrv.Serve(aln)
		logger.Info("admin endpoint listening", "admin", aln.Addr().String())
	}

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for range hup {
			restart, err := reloader.Reload()
			if err != nil {
				reloadOK.Set(0)
				logger.Error("config reload failed; keeping the running config", "err", err)
				continue
			}
			reloadOK.Set(1)
			reloadTime.SetToCurrentTime()
			cfg := reloader.Current()
			p.Update(cfg, reloader.Policy())
			level.Set(logLevel(cfg.LogLevel))
			if err := auditLog.Reopen(); err != nil {
				logger.Error("audit file reopen failed", "err", err)
			}
			logger.Info("config reloaded", "policy_version", reloader.Policy().Version, "protected_tables", len(cfg.Tables))
			if len(restart) > 0 {
				logger.Warn("changed settings take effect only after a restart", "keys", strings.Join(restart, ","))
			}
		}
	}()

	serveErr := make(chan error, 1)
	go func() { serveErr <- p.Serve(ln) }()
	select {
	case err := <-serveErr:
		if err != nil {
			return err
		}
	case <-ctx.Done():
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

func logLevel(s string) slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return slog.LevelInfo
	}
	return l
}

func newLogger(w io.Writer, format string, level *slog.LevelVar) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
