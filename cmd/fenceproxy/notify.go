package main

import (
	"fmt"
	"net"
	"os"
	"strings"
)

// sdNotify tells the service manager about the proxy's state, as
// sd_notify(3): READY=1 once the listeners accept, RELOADING=1 and READY=1
// around a reload, STOPPING=1 when draining starts. systemd sets
// $NOTIFY_SOCKET for Type=notify units; without it this does nothing.
func sdNotify(state ...string) error {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return nil
	}
	// A leading @ names an abstract socket; Go's net package maps it.
	if !strings.HasPrefix(addr, "/") && !strings.HasPrefix(addr, "@") {
		return fmt.Errorf("NOTIFY_SOCKET %q: only unix socket paths and @abstract names are supported", addr)
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(strings.Join(state, "\n"))); err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	return nil
}
