package main

import (
	"net"
	"testing"
)

func TestPickThreads(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setting int
		env     string
		cpus    int
		local   bool
		pinned  bool
		want    int // 0: the runtime's default
	}{
		{"environment wins over the config", 3, "2", 8, true, false, 0},
		{"environment wins over auto", 0, "1", 2, true, false, 0},
		{"config", 3, "", 8, true, false, 3},
		{"config wins over pinned", 3, "", 8, true, true, 3},
		{"config above the CPUs", 16, "", 2, false, false, 16},
		{"auto, local backend, 2 CPUs", 0, "", 2, true, false, 1},
		{"auto, local backend, 8 CPUs", 0, "", 8, true, false, 4},
		{"auto, local backend, 3 CPUs", 0, "", 3, true, false, 1},
		{"auto, local backend, 1 CPU", 0, "", 1, true, false, 0},
		{"auto, local backend, pinned to 4 CPUs", 0, "", 4, true, true, 0},
		{"auto, remote backend", 0, "", 2, false, false, 0},
		{"auto, remote backend, 16 CPUs", 0, "", 16, false, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := pickThreads(tc.setting, tc.env, tc.cpus, tc.local, tc.pinned)
			if c.n != tc.want || c.why == "" {
				t.Errorf("pickThreads(%d, %q, %d, %v) = %d (%q), want %d", tc.setting, tc.env, tc.cpus, tc.local, c.n, c.why, tc.want)
			}
		})
	}
}

func TestIsLocalAddress(t *testing.T) {
	own := ""
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() {
				own = net.JoinHostPort(n.IP.String(), "3306")
				break
			}
		}
	}
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:3306", true},
		{"127.0.0.2:3306", true},
		{"[::1]:3306", true},
		{"localhost:3306", true},
		{"0.0.0.0:3306", true},
		{"192.0.2.10:3306", false}, // TEST-NET-1: never a local address
		{"db.invalid:3306", false}, // does not resolve
		{"no-port", false},
		{own, true},
	} {
		if tc.addr == "" {
			continue
		}
		t.Run(tc.addr, func(t *testing.T) {
			if got := isLocalAddress(tc.addr); got != tc.want {
				t.Errorf("isLocalAddress(%q) = %v, want %v", tc.addr, got, tc.want)
			}
		})
	}
}

func TestCountCPUList(t *testing.T) {
	for list, want := range map[string]int{
		"0": 1, "0-1": 2, "0-3,8,10-11": 7, "": 0, "a-b": 0, "3-1": 0, "0,": 0,
	} {
		if got := countCPUList(list); got != want {
			t.Errorf("countCPUList(%q) = %d, want %d", list, got, want)
		}
	}
}
