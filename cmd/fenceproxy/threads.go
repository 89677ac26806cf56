package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/fenceproxy/fenceproxy/policy"
)

// The proxy's threads (GOMAXPROCS), decided from measurements on 2 cores
// shared by sysbench, MariaDB and the proxy (README, Benchmarks): with the
// runtime's default of one thread per CPU, the proxy spent 52-55 us of CPU
// per point_select at 1 client thread and 31-34 us at 4, against 43-50 and
// 24-33 us with one thread, and the same at 16 (22-33 us): the second
// thread mostly spins looking for work, and on shared cores that time is
// taken from the server and the clients. Throughput ratios to haproxy were
// within the rounds' noise either way. So where the server is on the same
// host the proxy takes half the CPUs it may use, and elsewhere (a host of
// its own, a sidecar with a remote server) all of them: it is never capped
// where it has cores to spare.

// threadChoice is how many threads the proxy runs with, and why.
type threadChoice struct {
	n   int    // 0: leave the runtime's default (and its updates to cgroup limits)
	why string // for the log
}

// pickThreads decides limits.threads: the environment's GOMAXPROCS first,
// then the config, then auto. cpus is the runtime's default, which already
// counts the CPU affinity mask (taskset) and a cgroup CPU limit; pinned:
// the affinity mask leaves out some of the host's CPUs, so someone gave the
// proxy CPUs of its own, and it takes them all.
func pickThreads(setting int, env string, cpus int, backendLocal, pinned bool) threadChoice {
	switch {
	case env != "":
		return threadChoice{why: "GOMAXPROCS from the environment"}
	case setting > 0:
		return threadChoice{n: setting, why: "limits.threads"}
	case pinned:
		return threadChoice{why: fmt.Sprintf("auto: all %d CPUs of the process's affinity mask", cpus)}
	case backendLocal && cpus > 1:
		return threadChoice{n: cpus / 2, why: fmt.Sprintf("auto: the backend is on this host, half of %d CPUs", cpus)}
	default:
		return threadChoice{why: fmt.Sprintf("auto: all %d CPUs the process may use", cpus)}
	}
}

// defaultProcs is the runtime's own choice, read before the proxy changes it.
var defaultProcs = runtime.GOMAXPROCS(0)

// applyThreads sets GOMAXPROCS for a config, at start and on every reload.
func applyThreads(cfg *policy.Config, logger *slog.Logger) {
	env := os.Getenv("GOMAXPROCS")
	c := pickThreads(cfg.Limits.Threads, env, defaultProcs, isLocalAddress(cfg.Backend.Address), pinned())
	if c.n > 0 {
		runtime.GOMAXPROCS(c.n)
	} else if env == "" {
		runtime.SetDefaultGOMAXPROCS()
	}
	logger.Info("threads", "gomaxprocs", runtime.GOMAXPROCS(0), "why", c.why)
}

// isLocalAddress: host:port names this host (a loopback address, one of
// its interfaces' addresses, or a name that resolves to one). A name that
// does not resolve within a second counts as remote.
func isLocalAddress(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	var ips []net.IP
	if ip := net.ParseIP(host); ip != nil {
		ips = []net.IP{ip}
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
		if err != nil {
			return false
		}
		for _, a := range addrs {
			ips = append(ips, a.IP)
		}
	}
	own, _ := net.InterfaceAddrs()
	for _, ip := range ips {
		if ip.IsLoopback() || ip.IsUnspecified() {
			return true
		}
		for _, a := range own {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return true
			}
		}
	}
	return false
}

// pinned: the process may run on fewer CPUs than the host has online.
func pinned() bool {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return false
	}
	online := countCPUList(strings.TrimSpace(string(b)))
	return online > 0 && runtime.NumCPU() < online
}

// countCPUList counts the CPUs of a kernel CPU list ("0-3,8,10-11"); 0 when
// it cannot be read.
func countCPUList(list string) int {
	n := 0
	for _, part := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0
			}
		}
		n += b - a + 1
	}
	return n
}
