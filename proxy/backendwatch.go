package proxy

import (
	"sync/atomic"
	"time"

	"github.com/fenceproxy/fenceproxy/proxy/wire"
)

// watchAfter is how long a client must be idle, outside a transaction,
// before the proxy also watches its backend connection. A server that ends
// an idle session (wait_timeout, KILL, a restart) then gets the client's
// connection closed at once, so that a pool's liveness check before reuse
// sees a dead connection instead of sending a command into it. Commands
// that follow each other faster cost nothing extra; inside a transaction
// or mid-command the client learns of a lost backend from its next
// command, as it would from the server itself.
const watchAfter = 200 * time.Millisecond

// backendWatch is one goroutine blocked in a read of the backend while the
// client is idle.
type backendWatch struct {
	done  chan struct{}
	fired atomic.Bool // the backend sent something or closed: the session is over
}

func (c *clientConn) startWatch() *backendWatch {
	w := &backendWatch{done: make(chan struct{})}
	parked := c.backend.Parked()
	go func() {
		defer close(w.done)
		defer c.recoverGoroutine("idle watch", nil)
		c.testPanic(panicWatch)
		var err error
		if parked {
			err = c.backend.WaitReadable()
		} else {
			err = c.backend.AwaitData()
		}
		if err != nil && isTimeout(err) {
			return // stopped: the client sent a command, or the wait ended
		}
		// Between commands the server sends nothing unasked, except an
		// error right before it closes (MySQL 8: "disconnected by the
		// server because of inactivity").
		w.fired.Store(true)
		c.mu.Lock()
		if c.idle {
			c.client.SetReadDeadline(time.Now())
		}
		c.mu.Unlock()
	}()
	return w
}

// stop ends the watch and waits for its goroutine, so that the backend is
// the caller's alone again.
func (w *backendWatch) stop(c *clientConn) {
	select {
	case <-w.done:
	default:
		c.backend.SetReadDeadline(time.Now())
		<-w.done
	}
	c.backend.SetReadDeadline(time.Time{})
}

// backendGone passes on whatever the backend sent before it closed the idle
// session (an error packet the client's library can show) and ends the
// connection.
func (c *clientConn) backendGone() error {
	wire.PassLast(c.client, c.backend, time.Second)
	return errGone
}
