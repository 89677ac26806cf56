package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"

	"github.com/fenceproxy/fenceproxy/catalog"
	"github.com/fenceproxy/fenceproxy/catalog/infoschema"
	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// The schema catalog (package catalog): read with the proxy's own account,
// refreshed every catalog.refresh and right after DDL that passes through
// the proxy; every change rebuilds the rewriter with the new closure.

// catalogWatch is the proxy's running catalog Watcher.
type catalogWatch struct {
	w      *infoschema.Watcher
	cancel context.CancelFunc
	done   chan struct{}
}

// startCatalog reads the catalog once before the proxy serves (so that the
// first statements are decided with it) and then keeps it fresh.
func (p *Proxy) startCatalog(every time.Duration) {
	w := infoschema.NewWatcher(p.adminDB, every, p.catalogChanged, p.logger)
	w.OnCheck = func() {
		// A completed read may have seen what was absent before.
		if rt := p.rt.Load(); rt != nil {
			rt.engine.ClearAbsent()
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cw := &catalogWatch{w: w, cancel: cancel, done: make(chan struct{})}
	p.catalog = cw
	first, stop := context.WithTimeout(ctx, 15*time.Second)
	w.Refresh(first)
	stop()
	if s := w.State(); s.Snapshot == nil && s.Err == nil {
		p.catalogChanged(infoschema.State{Err: context.DeadlineExceeded})
	}
	go func() {
		defer close(cw.done)
		w.Run(ctx)
	}()
}

func (p *Proxy) stopCatalog() {
	if p.catalog != nil {
		p.catalog.cancel()
		<-p.catalog.done
	}
}

// catalogChanged installs a new catalog state: the runtime is rebuilt with
// the current config and policy.
func (p *Proxy) catalogChanged(st infoschema.State) {
	p.updateMu.Lock()
	defer p.updateMu.Unlock()
	p.catState.Store(&st)
	if old := p.rt.Load(); old != nil {
		p.install(old.cfg, old.policy)
	}
}

// CatalogState returns the catalog state the proxy decides statements
// with (the installed runtime's: a refresh stores its state before the
// runtime built from it is installed), and false when the proxy keeps no
// catalog (catalog.refresh 0s or no backend.user).
func (p *Proxy) CatalogState() (infoschema.State, bool) {
	if p.catalog == nil {
		return infoschema.State{}, false
	}
	if rt := p.rt.Load(); rt != nil && rt.catalog != nil {
		return *rt.catalog, true
	}
	return infoschema.State{}, true
}

// CatalogChecks is the number of catalog refreshes completed, and
// WaitCatalog waits for one more than n: tests await a refresh by
// condition.
func (p *Proxy) CatalogChecks() uint64 {
	if p.catalog == nil {
		return 0
	}
	return p.catalog.w.Checks()
}

func (p *Proxy) WaitCatalog(ctx context.Context, n uint64) error {
	if p.catalog == nil {
		return errors.New("the proxy keeps no catalog")
	}
	return p.catalog.w.WaitChecks(ctx, n)
}

// catalogOptions returns the rewriter's view of the catalog for a policy,
// and the state it is built from.
func (p *Proxy) catalogOptions(pol *policy.Policy) (*catalog.Closure, string, *infoschema.State) {
	if p.catalog == nil {
		return nil, "", nil
	}
	st := p.catState.Load()
	if st == nil {
		return nil, "the catalog has not been read yet", nil
	}
	var c *catalog.Closure
	if st.Snapshot != nil {
		c = catalog.Close(withoutGuardTriggers(st.Snapshot, pol), rewrite.ProtectedFor(pol))
	}
	stale := ""
	if st.Err != nil {
		stale = st.Err.Error()
	} else if st.Snapshot == nil {
		stale = "the catalog has not been read yet"
	}
	return c, stale, st
}

// checkProtectedTables compares the protected tables with the catalog's
// last snapshot. A protected table renamed (or dropped and re-created
// under another name) on the server keeps its rows under a name the policy
// does not protect, and every write to it goes through unfenced, while the
// proxy's own checks ran only at start and on reload. So each catalog read
// says which protected tables it did not find: a log line when one goes
// missing or comes back, and fenceproxy_protected_table_missing{table}.
// Tables declared created_later may be missing. The caller holds updateMu.
func (p *Proxy) checkProtectedTables(pol *policy.Policy) {
	g := p.metrics.ProtectedTableMissing
	st := p.catState.Load()
	if p.catalog == nil || st == nil || st.Snapshot == nil {
		g.Reset()
		return
	}
	seen := make(map[string]bool, len(st.Snapshot.Tables))
	for _, n := range st.Snapshot.Tables {
		seen[tableKey(n.Schema, n.Name)] = true
	}
	missing := map[string]bool{}
	g.Reset()
	for _, t := range pol.Tables {
		k := tableKey(t.Schema, t.Table)
		v := 0.0
		if !seen[k] && !t.CreatedLater {
			missing[k] = true
			v = 1
			if !p.missing[k] {
				p.logger.Error("a protected table is missing from the schema catalog: renamed or dropped on the server? "+
					"Writes to the table it became are not fenced; rename it back, or protect the new name and reload",
					"table", t.Schema+"."+t.Table)
			}
		} else if p.missing[k] {
			p.logger.Info("a protected table is back in the schema catalog", "table", t.Schema+"."+t.Table)
		}
		g.WithLabelValues(t.Schema + "." + t.Table).Set(v)
	}
	p.missing = missing
}

// catalogFingerprint: prepared statements are decided again when what the
// catalog fences changes.
func catalogFingerprint(c *catalog.Closure, stale string) string {
	if c == nil && stale == "" {
		return ""
	}
	h := sha256.New()
	for _, l := range c.Lines() {
		h.Write([]byte(l))
		h.Write([]byte{'\n'})
	}
	if stale != "" {
		h.Write([]byte("stale"))
	}
	return "|catalog=" + hex.EncodeToString(h.Sum(nil))
}

// freshCatalogFor decides again a statement the rewriter refused because it
// writes to or calls an object the catalog never saw (d.Refusal
// .CatalogUnknown): a view or routine created on the server a moment ago
// must be fenced at once, not after the next periodic read. It makes sure
// a catalog read that began after the statement arrived has completed (one
// read at a time for the whole proxy: a statement that arrived before a
// read began is settled by it), then asks again with the runtime that read
// installed; an object that read did not have either does not exist (or
// is a temporary table) and is marked absent until the next read. When no
// such read completed (it failed, or took longer than catalogWait) nothing
// is marked: the statement stays refused (fail closed). ask is the
// rewriter's Query or Prepare.
func (c *clientConn) freshCatalogFor(d rewrite.Decision, arrived time.Time,
	ask func(*rewrite.Engine) rewrite.Decision) rewrite.Decision {
	cw := c.p.catalog
	if cw == nil {
		return d
	}
	return settleUnknown(d, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), catalogWait)
		defer cancel()
		start := time.Now()
		ok := cw.w.RefreshSince(ctx, arrived)
		c.p.metrics.catalogWaits.Observe(time.Since(start).Seconds())
		return ok
	}, func() *rewrite.Engine { return c.p.rt.Load().engine }, ask)
}

// settleUnknown is freshCatalogFor's loop: read makes sure a catalog read
// that began after the statement arrived has completed without error (and
// reports whether one has), engine is the current rewriter.
func settleUnknown(d rewrite.Decision, read func() bool, engine func() *rewrite.Engine,
	ask func(*rewrite.Engine) rewrite.Decision) rewrite.Decision {
	if d.Action != rewrite.Refuse || !d.Refusal.CatalogUnknown {
		return d
	}
	if !read() {
		// No read since the statement arrived: what the catalog lacks may
		// exist. Ask again only for the current runtime's refusal (a
		// failed read installs a stale one, which says why).
		return ask(engine())
	}
	d = ask(engine())
	for i := 0; i < maxUnknownObjects && d.Action == rewrite.Refuse && d.Refusal.CatalogUnknown; i++ {
		// Every runtime installed from now on comes from a read that began
		// after the statement arrived (reads go one at a time), and this
		// one had not the object either: absent, for this engine.
		e := engine()
		e.MarkAbsent(d.Refusal.Unknown[0], d.Refusal.Unknown[1])
		d = ask(e)
	}
	return d
}

// maxUnknownObjects bounds the objects of one statement marked absent one
// by one; past it the statement stays refused.
const maxUnknownObjects = 16

// catalogWait bounds how long a statement waits for a catalog read.
const catalogWait = 15 * time.Second

// afterDDL refreshes the catalog right after a statement that may have
// changed it (rewrite.Decision.ChangesSchema), before the client's next
// command: that connection's next statements see the new objects.
func (c *clientConn) afterDDL() {
	cw := c.p.catalog
	if cw == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cw.w.Refresh(ctx)
}
