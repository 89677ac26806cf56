package proxy

import (
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the proxy's Prometheus collectors. Per-command children are
// resolved once, so the hot path only adds to atomics.
type Metrics struct {
	opsMetrics // gauges of the proxy's state (opsmetrics.go)

	ConnectionsActive   prometheus.Gauge
	ConnectionsTotal    prometheus.Counter
	ConnectionsRejected *prometheus.CounterVec
	Commands            *prometheus.CounterVec
	CommandDuration     *prometheus.HistogramVec
	Bytes               *prometheus.CounterVec
	BackendDialFailures prometheus.Counter
	AuthFailures        prometheus.Counter
	LoginFailures       *prometheus.CounterVec
	Statements          *prometheus.CounterVec
	StaleRejected       *prometheus.CounterVec
	StatementsRefused   *prometheus.CounterVec
	BackendUp           prometheus.Gauge
	AuditErrors         *prometheus.CounterVec
	AuditTableWritten   prometheus.Counter
	AuditTableDropped   prometheus.Counter
	LeaseCalls          *prometheus.CounterVec
	Draining            prometheus.Gauge
	CertReloadOK        *prometheus.GaugeVec
	CertExpiry          *prometheus.GaugeVec
	// DatabaseGuardMissing: 1 for a protected table whose guard triggers
	// are missing or outdated (its writes are refused), 0 when current.
	DatabaseGuardMissing *prometheus.GaugeVec
	// ProtectedTableMissing: 1 for a protected table the last catalog
	// read did not find (renamed or dropped on the server), 0 when found.
	ProtectedTableMissing *prometheus.GaugeVec
	ConnectionPanics      prometheus.Counter

	// The schema catalog's health, read at scrape time from the proxy
	// that set catalogSource (before that: no catalog).
	CatalogEnabled     prometheus.GaugeFunc
	CatalogReadable    prometheus.GaugeFunc
	CatalogLastSuccess prometheus.GaugeFunc
	catalog            atomic.Pointer[func() (enabled, readable bool, last time.Time)]
	// CatalogWaits: how long statements that name an object the catalog
	// never saw waited for a catalog read (proxy/catalog.go).
	CatalogWaits prometheus.Histogram
	catalogWaits prometheus.Observer

	// per command byte; unknown commands share the "other" children
	commands                          [256]prometheus.Counter
	durations                         [256]prometheus.Observer
	bytesToServer                     prometheus.Counter
	bytesToClient                     prometheus.Counter
	stmtForwarded                     prometheus.Counter
	stmtFenced                        prometheus.Counter
	stmtRefused                       prometheus.Counter
	stmtAnswered                      prometheus.Counter
	loginFailures                     []prometheus.Counter // by LoginFailureReasons
	auditFileErrors, auditTableErrors prometheus.Counter
	// connectionsRejected by rejectReasons
	connectionsRejected [len(rejectReasons)]prometheus.Counter
}

// The reasons of fenceproxy_connections_rejected_total, each initialised at 0.
var rejectReasons = [...]string{"max_connections", "tls_required", "proxy_protocol"}

const (
	rejectMaxConnections = iota
	rejectTLSRequired
	rejectProxyProtocol
)

// NewMetrics creates the collectors and registers them with reg (nil: not
// registered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		ConnectionsActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fenceproxy_connections_active", Help: "Client connections currently open."}),
		ConnectionsTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fenceproxy_connections_total", Help: "Client connections accepted."}),
		ConnectionsRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceproxy_connections_rejected_total", Help: "Client connections refused before authentication, by reason: max_connections, tls_required, proxy_protocol (a PROXY header missing from a trusted source, malformed, or sent by an untrusted one)."},
			[]string{"reason"}),
		Commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceproxy_commands_total", Help: "Client commands relayed, by command."}, []string{"command"}),
		CommandDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fenceproxy_command_duration_seconds", Help: "Time from a command's arrival to the end of its response, by command.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10}},
			[]string{"command"}),
		Bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceproxy_bytes_total", Help: "Bytes relayed, by direction."}, []string{"direction"}),
		Draining: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fenceproxy_draining", Help: "1 once the proxy is shutting down (SIGTERM): /readyz answers 503 from then on."}),
		BackendDialFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fenceproxy_backend_dial_failures_total", Help: "Failed attempts to connect to the backend (dial, TLS, handshake or login), by clients and by the active health check."}),
		AuthFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fenceproxy_auth_failures_total", Help: "Client logins the backend rejected for their credentials (wrong password, unknown user: error 1045, 1698); logins refused for another reason count in fenceproxy_login_failures_total only."}),
		LoginFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceproxy_login_failures_total", Help: "Client logins the backend refused, by reason: authentication (1045, 1698), database (1044, 1049), limit (1040, 1203, 1226), host (1129, 1130), auth_plugin, password_expired, account_locked, transport, other."},
			[]string{"reason"}),
		Statements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceproxy_statements_total", Help: "COM_QUERY and COM_STMT_PREPARE packets by what the proxy did: forwarded, fenced, refused, answered."},
			[]string{"action"}),
		StaleRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceproxy_stale_writes_rejected_total", Help: "Writes to protected tables rejected by the fence (mode=enforce), or that it would have rejected (mode=shadow), by table, lease and reason."},
			[]string{"table", "lease", "reason", "mode"}),
		StatementsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceproxy_statements_refused_total", Help: "Statements the proxy refused (mode=enforce) or would have refused (mode=shadow) because it cannot fence them, by reason: protected_table (names a protected table: DDL, LOAD DATA, ...), unverifiable (cannot be checked: PREPARE FROM a variable, unreadable text, a malformed lease call)."},
			[]string{"reason", "mode"}),
		BackendUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fenceproxy_backend_up", Help: "1 when the last connection to the backend (the active health check every backend.health_interval, a client's, or a readiness check) succeeded, 0 when it failed."}),
		AuditErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceproxy_audit_write_errors_total", Help: "Audit records that could not be written, by destination: file (audit.file: the disk, permissions), table (fenced_audit: the INSERT failed; the file has them)."},
			[]string{"destination"}),
		AuditTableWritten: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fenceproxy_audit_table_written_total", Help: "Audit records written to the audit table (fenced_audit)."}),
		AuditTableDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fenceproxy_audit_table_dropped_total", Help: "Audit records that never reached the audit table (queue full, write failed, no schema, shutdown); the audit file still has them."}),
		ConnectionPanics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fenceproxy_connection_panics_total", Help: "Client connections closed by an internal error (a panic) in the proxy: each is logged with its stack; the other connections were not affected."}),
		CertReloadOK: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fenceproxy_certificate_last_reload_successful", Help: "Whether the last load of a TLS certificate (client_tls, admin_tls, backend_client, backend_ca) succeeded: 0 means its files did not load on the last reload (SIGHUP) and the one loaded before is still in use."},
			[]string{"certificate"}),
		CertExpiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fenceproxy_certificate_expiry_timestamp_seconds", Help: "When the TLS certificate in use expires (for backend_ca: the first CA of the bundle to expire), as a Unix time."},
			[]string{"certificate"}),
		LeaseCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceproxy_lease_calls_total", Help: "SQL lease functions answered by the proxy, by function and result: ok (acquired, renewed, released, status read), held (fence_acquire: held by another owner), lost (fence_renew/fence_release: the session's lease expired, was taken over or released), error."},
			[]string{"func", "result"}),
	}
	m.DatabaseGuardMissing = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fenceproxy_database_guard_missing",
		Help: "With fencing.database_guard: triggers, 1 for a protected table whose guard triggers are missing or outdated (writes to it are refused until fenceproxy init installs them), 0 when they are current."},
		[]string{"table"})
	m.ProtectedTableMissing = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fenceproxy_protected_table_missing",
		Help: "With the schema catalog, 1 for a protected table (not created_later) that the last catalog read did not find: renamed or dropped on the server, its rows may now be in a table the policy does not protect. 0 when found."},
		[]string{"table"})
	cat := func() (bool, bool, time.Time) {
		if f := m.catalog.Load(); f != nil {
			return (*f)()
		}
		return false, false, time.Time{}
	}
	m.CatalogEnabled = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fenceproxy_catalog_enabled", Help: "1 when the proxy keeps a schema catalog (backend.user, catalog.refresh not 0s), 0 when it runs without one."},
		func() float64 { e, _, _ := cat(); return b2f(e) })
	m.CatalogReadable = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fenceproxy_catalog_readable", Help: "1 when the last catalog refresh read the catalog, 0 when it failed or none has yet (or there is no catalog): writes to objects the last good catalog does not know are refused meanwhile."},
		func() float64 { _, r, _ := cat(); return b2f(r) })
	m.CatalogLastSuccess = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fenceproxy_catalog_last_refresh_success_timestamp_seconds", Help: "Time of the last catalog refresh that found the catalog current (0: never)."},
		func() float64 {
			_, _, last := cat()
			if last.IsZero() {
				return 0
			}
			return float64(last.UnixNano()) / 1e9
		})
	m.CatalogWaits = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "fenceproxy_catalog_wait_seconds", Help: "Time a statement that writes to or calls an object the schema catalog never saw waited for a catalog read that began after it arrived.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10}})
	m.catalogWaits = m.CatalogWaits
	// Histogram children only for the commands apps use all the time;
	// the rest are counted and timed under "other" to keep /metrics short.
	other := m.Commands.WithLabelValues("other")
	otherD := m.CommandDuration.WithLabelValues("other")
	for i := range m.commands {
		m.commands[i], m.durations[i] = other, otherD
	}
	for _, b := range []byte{mysql.COM_QUERY, mysql.COM_STMT_PREPARE, mysql.COM_STMT_EXECUTE,
		mysql.COM_STMT_CLOSE, mysql.COM_PING, mysql.COM_INIT_DB, mysql.COM_QUIT, mysql.COM_STMT_FETCH,
		mysql.COM_STMT_RESET, mysql.COM_STMT_SEND_LONG_DATA, mysql.COM_CHANGE_USER, mysql.COM_RESET_CONNECTION} {
		name := commandName(b)
		m.commands[b] = m.Commands.WithLabelValues(name)
		m.durations[b] = m.CommandDuration.WithLabelValues(name)
	}
	m.bytesToServer = m.Bytes.WithLabelValues("client_to_backend")
	m.bytesToClient = m.Bytes.WithLabelValues("backend_to_client")
	m.stmtForwarded = m.Statements.WithLabelValues("forwarded")
	m.stmtFenced = m.Statements.WithLabelValues("fenced")
	m.stmtRefused = m.Statements.WithLabelValues("refused")
	m.stmtAnswered = m.Statements.WithLabelValues("answered")
	m.auditFileErrors = m.AuditErrors.WithLabelValues("file")
	m.auditTableErrors = m.AuditErrors.WithLabelValues("table")
	for i, r := range rejectReasons {
		m.connectionsRejected[i] = m.ConnectionsRejected.WithLabelValues(r)
	}
	for _, r := range LoginFailureReasons {
		m.loginFailures = append(m.loginFailures, m.LoginFailures.WithLabelValues(r))
	}
	m.opsMetrics = newOpsMetrics(reg)
	m.initLeaseCalls()
	if reg != nil {
		reg.MustRegister(m.ConnectionsActive, m.ConnectionsTotal, m.ConnectionsRejected, m.Commands,
			m.CommandDuration, m.Bytes, m.BackendDialFailures, m.AuthFailures, m.LoginFailures, m.Statements,
			m.StaleRejected, m.StatementsRefused, m.BackendUp, m.AuditErrors, m.AuditTableWritten, m.AuditTableDropped, m.LeaseCalls, m.Draining,
			m.DatabaseGuardMissing, m.ProtectedTableMissing, m.ConnectionPanics, m.CertReloadOK, m.CertExpiry, m.CatalogWaits,
			m.CatalogEnabled, m.CatalogReadable, m.CatalogLastSuccess)
	}
	return m
}

var commandNames = map[byte]string{
	mysql.COM_QUIT: "quit", mysql.COM_INIT_DB: "init_db", mysql.COM_QUERY: "query",
	mysql.COM_FIELD_LIST: "field_list", mysql.COM_REFRESH: "refresh", mysql.COM_STATISTICS: "statistics",
	mysql.COM_PROCESS_INFO: "process_info", mysql.COM_PROCESS_KILL: "process_kill", mysql.COM_DEBUG: "debug",
	mysql.COM_PING: "ping", mysql.COM_CHANGE_USER: "change_user", mysql.COM_BINLOG_DUMP: "binlog_dump",
	mysql.COM_REGISTER_SLAVE: "register_slave", mysql.COM_STMT_PREPARE: "stmt_prepare",
	mysql.COM_STMT_EXECUTE: "stmt_execute", mysql.COM_STMT_SEND_LONG_DATA: "stmt_send_long_data",
	mysql.COM_STMT_CLOSE: "stmt_close", mysql.COM_STMT_RESET: "stmt_reset", mysql.COM_SET_OPTION: "set_option",
	mysql.COM_STMT_FETCH: "stmt_fetch", mysql.COM_BINLOG_DUMP_GTID: "binlog_dump_gtid",
	mysql.COM_RESET_CONNECTION: "reset_connection", comStmtBulkExecute: "stmt_bulk_execute",
}

// comStmtBulkExecute is MariaDB's COM_STMT_BULK_EXECUTE.
const comStmtBulkExecute = 0xfa

func commandName(b byte) string {
	if n, ok := commandNames[b]; ok {
		return n
	}
	return "other"
}

// backendDialFailed counts a failed backend connection and marks the
// backend down, before the client hears of it.
func (m *Metrics) backendDialFailed() {
	m.BackendDialFailures.Inc()
	m.BackendUp.Set(0)
}

func (m *Metrics) setBackendUp(up bool) {
	if up {
		m.BackendUp.Set(1)
	} else {
		m.BackendUp.Set(0)
	}
}

// catalogSource makes the catalog metrics read f.
func (m *Metrics) catalogSource(f func() (enabled, readable bool, last time.Time)) {
	m.catalog.Store(&f)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (m *Metrics) leaseCalls(fn, result string) prometheus.Counter {
	return m.LeaseCalls.WithLabelValues(fn, result)
}

// certLoaded records the outcome of loading a TLS certificate.
func (m *Metrics) certLoaded(label string, ok bool, notAfter time.Time) {
	if !ok {
		m.CertReloadOK.WithLabelValues(label).Set(0)
		return
	}
	m.CertReloadOK.WithLabelValues(label).Set(1)
	if !notAfter.IsZero() {
		m.CertExpiry.WithLabelValues(label).Set(float64(notAfter.Unix()))
	}
}
