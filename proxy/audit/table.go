package audit

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// TableName is the audit table in each schema (created by fenceproxy init).
const TableName = "fenced_audit"

// tableColumns are the columns Table fills, in the order of row's values.
var tableColumns = []string{"time", "reason", "mode", "lease", "table_name", "presented_owner",
	"presented_token", "current_token", "client", "user", "schema_name", "digest", "outcome", "detail",
	"instance", "conn_id", "backend_conn_id", "client_host", "program_name"}

// Defaults of TableOptions.
const (
	DefaultBatchSize  = 100
	DefaultFlushDelay = 20 * time.Millisecond
	// insertTimeout bounds one batch's INSERT: a table locked by another
	// session must not hold the queue for the server's lock_wait_timeout.
	insertTimeout = 10 * time.Second
	// retentionBatch rows are deleted per statement, so that retention
	// never holds locks on many rows at once.
	retentionBatch = 1000
)

// TableOptions configure a Table.
type TableOptions struct {
	DB        *sql.DB // the proxy's own account
	QueueSize int     // records waiting; past it they are dropped (file only)
	// Schema is where a record goes ("" = nowhere: dropped); it is asked
	// when the record is written, so that a reload applies at once.
	Schema func(Record) string
	// Schemas lists the schemas whose audit table retention trims.
	Schemas func() []string
	// Retention returns how old a row may get (0 = forever).
	Retention func() time.Duration

	// Written, Failed and Dropped are told how many records went to the
	// table, failed to (the INSERT returned an error), and never reached
	// it (failed, queue full, no schema, or still queued at Close).
	Written, Failed, Dropped func(n int)
	// OnError is told every failure, for the log; it is called from the
	// writer's goroutine.
	OnError func(what string, err error)

	BatchSize  int           // records per INSERT at most (default DefaultBatchSize)
	FlushDelay time.Duration // wait after the first record for more to batch (default DefaultFlushDelay)
}

// Table writes audit records to the audit tables in the background: Enqueue
// never blocks, a single goroutine batches queued records into multi-row
// INSERTs, one per schema.
type Table struct {
	o     TableOptions
	queue chan Record
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
	// closeCtx bounds the final flush; set by Close before stop closes.
	closeCtx context.Context

	sweepMu sync.Mutex
}

// StartTable starts the writer (and, when Retention can be non-zero, the
// retention sweeper).
func StartTable(o TableOptions) *Table {
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.FlushDelay <= 0 {
		o.FlushDelay = DefaultFlushDelay
	}
	if o.QueueSize <= 0 {
		o.QueueSize = 10000
	}
	nop := func(int) {}
	for _, f := range []*func(int){&o.Written, &o.Failed, &o.Dropped} {
		if *f == nil {
			*f = nop
		}
	}
	if o.OnError == nil {
		o.OnError = func(string, error) {}
	}
	if o.Retention == nil {
		o.Retention = func() time.Duration { return 0 }
	}
	if o.Schemas == nil {
		o.Schemas = func() []string { return nil }
	}
	t := &Table{o: o, queue: make(chan Record, o.QueueSize), stop: make(chan struct{}), done: make(chan struct{})}
	go t.run()
	go t.sweepLoop()
	return t
}

// QueueLen is the number of records waiting for the table.
func (t *Table) QueueLen() int { return len(t.queue) }

// QueueCap is the most records that can wait.
func (t *Table) QueueCap() int { return cap(t.queue) }

// Enqueue queues r for the table, or drops it (counted) when the queue is
// full.
func (t *Table) Enqueue(r Record) {
	select {
	case t.queue <- r:
	default:
		t.o.Dropped(1)
	}
}

// Close writes what is queued until ctx ends, drops (and counts) the rest,
// and stops the writer.
func (t *Table) Close(ctx context.Context) {
	t.once.Do(func() {
		t.closeCtx = ctx
		close(t.stop)
	})
	<-t.done
}

func (t *Table) run() {
	defer close(t.done)
	batch := make([]Record, 0, t.o.BatchSize)
	for {
		select {
		case r := <-t.queue:
			batch = append(batch[:0], r)
		case <-t.stop:
			t.drain(batch[:0])
			return
		}
		// Gather what arrives shortly after, up to a batch.
		timer := time.NewTimer(t.o.FlushDelay)
	gather:
		for len(batch) < t.o.BatchSize {
			select {
			case r := <-t.queue:
				batch = append(batch, r)
			case <-timer.C:
				break gather
			case <-t.stop:
				break gather
			}
		}
		timer.Stop()
		t.write(context.Background(), batch)
	}
}

// drain writes what is still queued at Close, within closeCtx.
func (t *Table) drain(batch []Record) {
	for {
		select {
		case r := <-t.queue:
			batch = append(batch, r)
			if len(batch) < t.o.BatchSize {
				continue
			}
		default:
		}
		if len(batch) == 0 {
			return
		}
		if t.closeCtx.Err() != nil {
			t.o.Dropped(len(batch) + len(t.queue))
			return
		}
		t.write(t.closeCtx, batch)
		batch = batch[:0]
	}
}

// write inserts batch, one statement per schema.
func (t *Table) write(ctx context.Context, batch []Record) {
	bySchema := map[string][]Record{}
	var order []string
	for _, r := range batch {
		s := t.o.Schema(r)
		if s == "" {
			t.o.Dropped(1)
			continue
		}
		if _, ok := bySchema[s]; !ok {
			order = append(order, s)
		}
		bySchema[s] = append(bySchema[s], r)
	}
	for _, s := range order {
		recs := bySchema[s]
		ictx, cancel := context.WithTimeout(ctx, insertTimeout)
		err := insertRecords(ictx, t.o.DB, s, recs)
		cancel()
		if err != nil {
			t.o.Failed(len(recs))
			t.o.Dropped(len(recs))
			t.o.OnError("writing "+quoteIdent(s)+"."+TableName, err)
			continue
		}
		t.o.Written(len(recs))
	}
}

func insertRecords(ctx context.Context, db *sql.DB, schema string, recs []Record) error {
	var b strings.Builder
	b.WriteString("INSERT INTO " + quoteIdent(schema) + "." + TableName + " (")
	for i, c := range tableColumns {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quoteIdent(c))
	}
	b.WriteString(") VALUES ")
	row := "(" + strings.Repeat("?, ", len(tableColumns)-1) + "?)"
	args := make([]any, 0, len(recs)*len(tableColumns))
	for i, r := range recs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
		args = append(args, rowValues(r)...)
	}
	_, err := db.ExecContext(ctx, b.String(), args...)
	return err
}

// rowValues are r's column values in tableColumns order, each string cut to
// its column's width (a longer value would fail the whole batch in strict
// mode; the file keeps it whole). The time goes as UTC text: the proxy's
// pool pins the session time zone to UTC.
func rowValues(r Record) []any {
	str := func(s string, n int) any { return cut(s, n) }
	null := func(s string, n int) any {
		if s == "" {
			return nil
		}
		return cut(s, n)
	}
	tok := func(p *uint64) any {
		if p == nil {
			return nil
		}
		return *p
	}
	return []any{r.Time.UTC().Format("2006-01-02 15:04:05.000000"), str(r.Reason, 32), str(r.Mode, 16),
		null(r.Lease, 191), str(r.Table, 129), null(r.PresentedOwner, 64), tok(r.PresentedToken), tok(r.CurrentToken),
		str(r.Client, 255), str(r.User, 255), str(r.Schema, 64), null(r.Digest, textBytes), str(r.Outcome, 16),
		null(r.Detail, textBytes), str(r.Instance, 255), r.ConnID, r.BackendConnID, str(r.ClientHost, 255), str(r.Program, 255)}
}

// textBytes is what a TEXT column holds.
const textBytes = 65535

// cut shortens s to at most n bytes, at a character boundary, so that it
// fits a VARCHAR(n) (which counts characters) or TEXT (bytes).
func cut(s string, n int) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// sweepLoop trims old rows while the writer runs.
func (t *Table) sweepLoop() {
	for {
		every := sweepInterval(t.o.Retention())
		select {
		case <-t.stop:
			return
		case <-time.After(every):
		}
		if t.o.Retention() > 0 {
			t.Sweep(context.Background())
		}
	}
}

// sweepInterval is how often retention runs: a tenth of the retention, so
// rows outlive it by at most that, between 1s and 10m.
func sweepInterval(retention time.Duration) time.Duration {
	if retention <= 0 {
		return time.Minute // check again later: a reload may set one
	}
	return min(max(retention/10, time.Second), 10*time.Minute)
}

// Sweep deletes rows older than the retention from every schema's audit
// table, retentionBatch rows per statement, and returns how many it
// deleted.
func (t *Table) Sweep(ctx context.Context) int64 {
	t.sweepMu.Lock()
	defer t.sweepMu.Unlock()
	keep := t.o.Retention()
	if keep <= 0 {
		return 0
	}
	var total int64
	for _, s := range t.o.Schemas() {
		q := "DELETE FROM " + quoteIdent(s) + "." + TableName +
			" WHERE `time` < NOW(6) - INTERVAL ? MICROSECOND ORDER BY `time` LIMIT " + fmt.Sprint(retentionBatch)
		for {
			select {
			case <-t.stop:
				return total
			default:
			}
			dctx, cancel := context.WithTimeout(ctx, insertTimeout)
			res, err := t.o.DB.ExecContext(dctx, q, keep.Microseconds())
			cancel()
			if err != nil {
				t.o.OnError("retention of "+quoteIdent(s)+"."+TableName, err)
				break
			}
			n, _ := res.RowsAffected()
			total += n
			if n < retentionBatch {
				break
			}
		}
	}
	return total
}

// quoteIdent quotes a MySQL identifier.
func quoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }
