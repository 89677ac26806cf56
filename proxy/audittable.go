package proxy

import (
	"context"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

// instanceID is the proxy's name in audit records: the override, else
// instance_id, else hostname:listen port.
func instanceID(cfg *policy.Config, override string) string {
	if override != "" {
		return override
	}
	if cfg.InstanceID != "" {
		return cfg.InstanceID
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	_, port, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		port = cfg.Listen
	}
	return host + ":" + port
}

// Instance is the proxy's instance id, as its audit records carry it.
func (p *Proxy) Instance() string { return p.instance }

// startAuditTable starts writing audit records to the audit tables through
// the proxy's own account, when it has one.
func (p *Proxy) startAuditTable(cfg *policy.Config) {
	if p.adminDB == nil {
		p.logger.Info("audit table not written: it needs the proxy's own account (backend.user); records go to the audit file, the log, metrics and /audit")
		return
	}
	var errLog rateLimited
	m := p.metrics
	p.auditTable = audit.StartTable(audit.TableOptions{
		DB:        p.adminDB,
		QueueSize: cfg.Audit.QueueSize,
		Schema:    p.auditSchema,
		Schemas:   p.auditSchemas,
		Retention: func() time.Duration { return p.rt.Load().cfg.Audit.Retention.D() },
		Written:   func(n int) { m.AuditTableWritten.Add(float64(n)) },
		Failed:    func(n int) { m.auditTableErrors.Add(float64(n)) },
		Dropped:   func(n int) { m.AuditTableDropped.Add(float64(n)) },
		OnError: func(what string, err error) {
			if n, ok := errLog.allow(time.Minute); ok {
				p.logger.Error("audit table: "+what+" failed (records still reach the audit file; run fenceproxy init in that schema if the table is missing)",
					"err", err, "suppressed_since_last", n)
			}
		},
	})
	p.audit.SetTable(p.auditTable)
}

// closeAuditTable flushes what is queued, for at most a few seconds even
// when ctx has already ended, so that a fast shutdown keeps its last
// records.
func (p *Proxy) closeAuditTable(ctx context.Context) {
	if p.auditTable == nil {
		return
	}
	p.audit.SetTable(nil)
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	p.auditTable.Close(fctx)
}

// AuditTable is the audit table writer, nil without backend.user.
func (p *Proxy) AuditTable() *audit.Table { return p.auditTable }

// auditSchema is where a record goes: audit.table_schema, else the
// protected table's schema as configured, else (a refusal naming no
// table) the first protected table's.
func (p *Proxy) auditSchema(r audit.Record) string {
	rt := p.rt.Load()
	if s := rt.cfg.Audit.TableSchema; s != "" {
		return s
	}
	if schema, table, ok := strings.Cut(r.Table, "."); ok && schema != "" {
		if t, ok := rt.policy.Lookup(schema, table); ok {
			return t.Schema
		}
		return schema
	}
	if len(rt.policy.Tables) > 0 {
		return rt.policy.Tables[0].Schema
	}
	return ""
}

// auditSchemas are the schemas whose audit tables retention trims.
func (p *Proxy) auditSchemas() []string {
	rt := p.rt.Load()
	if s := rt.cfg.Audit.TableSchema; s != "" {
		return []string{s}
	}
	var out []string
	for _, t := range rt.policy.Tables {
		if !slices.Contains(out, t.Schema) {
			out = append(out, t.Schema)
		}
	}
	return out
}

// auditOrigin fills in where a record's statement came from.
func (c *clientConn) auditOrigin(rec *audit.Record) {
	rec.Instance = c.p.instance
	rec.ConnID = c.id
	rec.BackendConnID = c.connID
	rec.ClientHost = c.remote()
	if h, _, err := net.SplitHostPort(c.remote()); err == nil {
		rec.ClientHost = h
	}
	rec.Program = c.program
}

// rateLimited lets one event through per interval and counts the rest.
type rateLimited struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func (r *rateLimited) allow(every time.Duration) (suppressed int, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.last.IsZero() && time.Since(r.last) < every {
		r.suppressed++
		return 0, false
	}
	n := r.suppressed
	r.last, r.suppressed = time.Now(), 0
	return n, true
}
