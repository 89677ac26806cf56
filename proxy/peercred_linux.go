package proxy

import (
	"net"
	"strconv"
	"syscall"
)

// peerCred is "pid=N,uid=N" of a Unix socket's peer (SO_PEERCRED).
func peerCred(uc *net.UnixConn) string {
	rc, err := uc.SyscallConn()
	if err != nil {
		return ""
	}
	var cred *syscall.Ucred
	rc.Control(func(fd uintptr) {
		cred, err = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	})
	if err != nil || cred == nil {
		return ""
	}
	return "pid=" + strconv.Itoa(int(cred.Pid)) + ",uid=" + strconv.Itoa(int(cred.Uid))
}
