// Package logging builds fenceproxy's slog logger and routes the libraries
// that log on their own (go-sql-driver, net/http, the standard log package)
// through it, so that with log_format json every line the process writes
// is one JSON object. It also rate-limits repetitive lines (see Limiter).
package logging

import (
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Formats of log_format.
const (
	FormatText = "text"
	FormatJSON = "json"
)

// New returns a logger writing format (text or json) to w at level.
//
// Durations are written as Go duration strings ("1.5s", "30s") in both
// formats: slog's JSON handler would write nanoseconds, its text handler a
// duration string, and the config file takes the same syntax, so a value
// read in the log can be compared with the key that set it.
func New(w io.Writer, format string, level slog.Leveler) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: replaceAttr}
	if format == FormatJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func replaceAttr(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// Install routes the loggers of libraries that do not take one through
// logger: the standard log package's default logger and go-sql-driver's
// (it prints "closing bad idle connection: EOF" and the like when a pooled
// connection to a restarted server is found dead). Call it before opening
// a go-sql-driver connector: each copies the driver's logger when made.
func Install(logger *slog.Logger) {
	slog.SetDefault(logger)
	mysql.SetLogger(driverLogger{logger.With("component", "go-sql-driver")})
}

// driverLogger is go-sql-driver's Logger over slog.
type driverLogger struct{ l *slog.Logger }

// Print writes the driver's message at warning level: the driver logs only
// what it could not return as an error (a dead pooled connection, a
// malformed packet).
func (d driverLogger) Print(v ...any) {
	d.l.Warn(joinArgs(v))
}

// joinArgs joins the driver's arguments with single spaces ("closing
// connection:" and an error, which fmt.Sprint would join without one).
func joinArgs(v []any) string {
	parts := make([]string, 0, len(v))
	for _, a := range v {
		if s := strings.TrimSpace(fmt.Sprint(a)); s != "" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, " ")
}

// HTTPErrorLog is an http.Server's ErrorLog writing through logger at
// warning level ("http: TLS handshake error from ...").
func HTTPErrorLog(logger *slog.Logger, component string) *log.Logger {
	return slog.NewLogLogger(logger.With("component", component).Handler(), slog.LevelWarn)
}

// Seconds is d in seconds rounded to the millisecond, for JSON values
// that are numbers of seconds ("remaining_seconds"): a float's binary
// digits would print -23.701999999999998.
func Seconds(d time.Duration) float64 {
	return float64(d.Round(time.Millisecond)) / float64(time.Second)
}
