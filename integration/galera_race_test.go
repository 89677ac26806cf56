package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
)

// The safety property on a Galera cluster, for fence shapes written as
// plain SQL (no proxy): writer A on node 1 writes under token t, B takes
// the lease over on node 2 (fence_token+1) at random moments, and node 3's
// binary log says in which order the cluster committed them. Galera commits
// write sets in their global order on every node, so one node's binary log
// (log_slave_updates) is the cluster's commit order; a sequence recorded by
// the writes themselves would add a row every transaction writes, which
// serialises them through certification and would hide the very race being
// measured.
//
// FENCEPROXY_GALERA_RACE sets how long each shape races (default 5s; CI: 30s).

// envGaleraRace is the per-shape race duration.
const envGaleraRace = "FENCEPROXY_GALERA_RACE"

func galeraRaceDuration(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv(envGaleraRace)
	if v == "" {
		return 5 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a duration such as 30s", envGaleraRace, v)
	}
	return d
}

// galeraFence is the fence condition the proxy writes, over session
// variables, for the lease row aliased fence_l.
const galeraFence = "fence_l.lease_name = @fence_lease AND fence_l.owner_token = @fence_owner AND " +
	"fence_l.fence_token = @fence_token AND fence_l.leased_until > SYSDATE(3)"

// galeraGuard is the guard statement measured for Galera: the fenced write
// changes the lease row in its own transaction, so certification orders
// it against a takeover on another node.
const galeraGuard = "UPDATE fenced_job_leases AS fence_l SET fence_l.fence_writes = fence_l.fence_writes + 1 WHERE " + galeraFence

// The verbatim writes of the race. tok records the token the writer held,
// so that the binary log shows which token each committed write had.
const (
	plainUpdate = "UPDATE runs SET tok = @fence_token, n = n + 1 WHERE id = ?"
	plainInsert = "INSERT INTO events (tok) VALUES (@fence_token)"
)

// A fenceShape writes one fenced UPDATE or INSERT on c. inTx says the
// caller has a transaction open; otherwise the shape runs in autocommit
// mode (and may open its own transaction, as a guard needs). It returns
// whether the write took effect (the fence held) and the affected rows the
// client would see.
type fenceShape struct {
	name string
	// safe: expected to let no stale write commit.
	safe  bool
	write func(ctx context.Context, c *sql.Conn, insert, inTx bool, id int) (bool, int64, error)
}

var galeraShapes = []fenceShape{
	{name: "exists_share_lock", safe: false, write: writeExists},
	{name: "guard_update", safe: true, write: writeGuarded},
	{name: "join_counter", safe: true, write: writeJoinCounter},
}

// writeExists is today's single-server shape: EXISTS (... LOCK IN SHARE MODE).
func writeExists(ctx context.Context, c *sql.Conn, insert, _ bool, id int) (bool, int64, error) {
	sub := "EXISTS (SELECT 1 FROM fenced_job_leases AS fence_l WHERE " + galeraFence + " LOCK IN SHARE MODE)"
	var r sql.Result
	var err error
	if insert {
		r, err = c.ExecContext(ctx, "INSERT INTO events (tok) SELECT @fence_token FROM DUAL WHERE "+sub)
	} else {
		r, err = c.ExecContext(ctx, "UPDATE runs SET tok = @fence_token, n = n + 1 WHERE id = ? AND "+sub, id)
	}
	if err != nil {
		return false, 0, err
	}
	n, _ := r.RowsAffected()
	return n > 0, n, nil
}

// writeGuarded runs the guard, then the statement unchanged if the guard
// changed the lease row; in autocommit mode both run in one transaction.
func writeGuarded(ctx context.Context, c *sql.Conn, insert, inTx bool, id int) (ok bool, n int64, err error) {
	stmt, args := plainUpdate, []any{id}
	if insert {
		stmt, args = plainInsert, nil
	}
	if !inTx {
		if _, err := c.ExecContext(ctx, "START TRANSACTION"); err != nil {
			return false, 0, err
		}
		defer func() {
			if err != nil || !ok {
				c.ExecContext(context.Background(), "ROLLBACK")
				return
			}
			if _, cerr := c.ExecContext(ctx, "COMMIT"); cerr != nil {
				ok, err = false, cerr
			}
		}()
	}
	g, err := c.ExecContext(ctx, galeraGuard)
	if err != nil {
		return false, 0, err
	}
	if gn, _ := g.RowsAffected(); gn != 1 {
		return false, 0, nil
	}
	r, err := c.ExecContext(ctx, stmt, args...)
	if err != nil {
		return false, 0, err
	}
	n, _ = r.RowsAffected()
	return true, n, nil
}

// writeJoinCounter is the in-statement form: a multi-table UPDATE that bumps
// the counter of the lease row it joins. INSERT has no such form: it takes
// the guard.
func writeJoinCounter(ctx context.Context, c *sql.Conn, insert, inTx bool, id int) (bool, int64, error) {
	if insert {
		return writeGuarded(ctx, c, insert, inTx, id)
	}
	r, err := c.ExecContext(ctx, "UPDATE runs JOIN fenced_job_leases AS fence_l ON "+galeraFence+
		" SET runs.tok = @fence_token, runs.n = runs.n + 1, fence_l.fence_writes = fence_l.fence_writes + 1 WHERE runs.id = ?", id)
	if err != nil {
		return false, 0, err
	}
	n, _ := r.RowsAffected()
	return n > 0, n, nil
}

// isConflict reports Galera's "not committed" answers: a certification
// failure or a brute-force abort (1213), or a lock wait timeout (1205).
func isConflict(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}

// galeraRaceSchema creates the race's tables on node 1, with a lease held
// by owner-a with token 1 for a day, and waits until node 3 has them.
func galeraRaceSchema(t *testing.T, c *dbserver.Cluster) (string, *sql.DB) {
	t.Helper()
	name := dbtest.NewDatabase(t, c.Nodes[0])
	root := dbtest.Open(t, c.Nodes[0].RootDSN(name))
	for _, q := range []string{
		`CREATE TABLE fenced_job_leases (
		   lease_name VARCHAR(191) NOT NULL PRIMARY KEY, owner_token VARBINARY(64) NOT NULL,
		   fence_token BIGINT UNSIGNED NOT NULL, leased_until TIMESTAMP(3) NOT NULL,
		   fence_writes BIGINT UNSIGNED NOT NULL DEFAULT 0) ENGINE=InnoDB`,
		"CREATE TABLE runs (id INT PRIMARY KEY, tok BIGINT NOT NULL, n BIGINT NOT NULL) ENGINE=InnoDB",
		"CREATE TABLE events (id BIGINT AUTO_INCREMENT PRIMARY KEY, tok BIGINT NOT NULL) ENGINE=InnoDB",
		"CREATE TABLE marker (id INT PRIMARY KEY) ENGINE=InnoDB",
		"INSERT INTO runs VALUES (1, 0, 0), (2, 0, 0), (3, 0, 0), (4, 0, 0)",
		"INSERT INTO fenced_job_leases (lease_name, owner_token, fence_token, leased_until) VALUES ('job', 'owner-a', 1, SYSDATE(3) + INTERVAL 1 DAY)",
	} {
		mustExec(t, root, q)
	}
	dbtest.AwaitGalera(t, c)
	n3 := dbtest.Open(t, withParam(c.Nodes[2].RootDSN(name), "wsrep_sync_wait=1"))
	var tok int
	if err := n3.QueryRow("SELECT fence_token FROM fenced_job_leases").Scan(&tok); err != nil {
		t.Fatalf("node 3 does not have the race's tables: %v", err)
	}
	return name, root
}

// raceCounts is what one race saw from the clients' side.
type raceCounts struct {
	committed, rejected, conflicts, takeovers, takeoverRetries atomic.Int64
	// tokens: the token each takeover the taker saw succeed moved the
	// lease to, as its own UPDATE computed it (LAST_INSERT_ID(expr)).
	mu     sync.Mutex
	tokens []int64
	// The longest a write (or transaction) and a takeover took, in µs.
	slowestWrite, slowestTakeover atomic.Int64
}

// taken is the takeovers' tokens the taker saw commit, in order.
func (rc *raceCounts) taken() []int64 {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := slices.Clone(rc.tokens)
	slices.Sort(out)
	return out
}

func noteSlowest(v *atomic.Int64, since time.Time) {
	d := time.Since(since).Microseconds()
	for {
		old := v.Load()
		if d <= old || v.CompareAndSwap(old, d) {
			return
		}
	}
}

// runGaleraRace races writers against takeovers on node 2 for d. The
// writers connect with writerDSN (node 1, or a proxy in front of it).
func runGaleraRace(t *testing.T, c *dbserver.Cluster, writerDSN string, shape fenceShape, d time.Duration) *raceCounts {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var counts raceCounts
	var wg sync.WaitGroup
	errc := make(chan error, 4)

	// Two writers on node 1, one per isolation level the design requires.
	for w, iso := range []string{"READ-COMMITTED", "REPEATABLE-READ"} {
		db := dbtest.Open(t, writerDSN+"&tx_isolation=%27"+iso+"%27")
		conn, err := db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		mustExec(t, conn, "SET @fence_lease = 'job', @fence_owner = 'owner-a', @fence_token = 1")
		// With the lock-only shape a write can wait out the default 50 s
		// (measured: 47 s) behind a lease row lock that Galera's applier
		// and the other writer hold between them; 1205 counts as not
		// committed, like 1213.
		mustExec(t, conn, "SET SESSION innodb_lock_wait_timeout = 3")
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := galeraWriter(ctx, conn, shape, w, &counts); err != nil {
				errc <- fmt.Errorf("writer %d (%s): %w", w, iso, err)
				cancel()
			}
		}()
	}

	// Takeovers on node 2.
	cfg, err := mysql.ParseDSN(writerDSN)
	if err != nil {
		t.Fatal(err)
	}
	b := dbtest.Open(t, c.Nodes[1].DSN(dbserver.AppUser, dbserver.AppPassword, cfg.DBName))
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			time.Sleep(time.Duration(2+rand.IntN(18)) * time.Millisecond) // pacing, not synchronisation
			for attempt := 0; ; attempt++ {
				start := time.Now()
				res, err := b.ExecContext(context.Background(), "UPDATE fenced_job_leases SET fence_token = LAST_INSERT_ID(fence_token + 1) WHERE lease_name = 'job'")
				noteSlowest(&counts.slowestTakeover, start)
				if err == nil {
					tok, _ := res.LastInsertId()
					// A takeover that matched no row committed nothing: node 2
					// applies node 1's writes asynchronously, so before
					// galeraRaceSchema waited for every node (AwaitGalera) the
					// first takeover could run before node 2 had the lease
					// row (measured: 7 of 20 UPDATEs on node 2 right after the
					// INSERT on node 1 matched nothing), was counted, and the
					// log showed one takeover fewer than the taker's count.
					if n, _ := res.RowsAffected(); n != 1 {
						errc <- fmt.Errorf("takeover to %d changed %d rows", tok, n)
						cancel()
						return
					}
					counts.takeovers.Add(1)
					counts.mu.Lock()
					counts.tokens = append(counts.tokens, tok)
					counts.mu.Unlock()
					break
				}
				if !isConflict(err) || attempt == 50 {
					errc <- fmt.Errorf("takeover: %w", err)
					cancel()
					return
				}
				counts.takeoverRetries.Add(1)
				time.Sleep(time.Duration(1+attempt) * time.Millisecond)
			}
		}
	}()
	wg.Wait()
	close(errc)
	// No statement runs under ctx, so no error is the run's end: every one
	// fails the test. (A filter for context.DeadlineExceeded also dropped a
	// real dial or read timeout, which errors.Is reports as that.)
	for err := range errc {
		t.Fatal(err)
	}
	return &counts
}

// galeraWriter writes until ctx ends: autocommit UPDATEs and INSERTs and
// explicit transactions of both, at random. After a rejected or conflicting
// write it takes the current token, as a worker re-acquiring would.
func galeraWriter(ctx context.Context, c *sql.Conn, shape fenceShape, w int, counts *raceCounts) error {
	bg := context.Background() // a statement in flight finishes: its outcome must be known
	for ctx.Err() == nil {
		id := 1 + w*2 + rand.IntN(2)
		var ok bool
		var err error
		start := time.Now()
		switch rand.IntN(3) {
		case 0:
			ok, _, err = shape.write(bg, c, false, false, id)
		case 1:
			ok, _, err = shape.write(bg, c, true, false, id)
		default:
			ok, err = galeraTx(bg, c, shape, id)
		}
		noteSlowest(&counts.slowestWrite, start)
		switch {
		case isConflict(err):
			counts.conflicts.Add(1)
		case err != nil:
			return err
		case ok:
			counts.committed.Add(1)
			continue
		default:
			counts.rejected.Add(1)
		}
		// A plain SELECT, then SET: the proxy refuses other reads of the
		// lease table (they would lock its rows).
		var tok int64
		if err := c.QueryRowContext(bg, "SELECT fence_token FROM fenced_job_leases WHERE lease_name = @fence_lease").Scan(&tok); err != nil {
			if isConflict(err) {
				continue
			}
			return err
		}
		if _, err := c.ExecContext(bg, "SET @fence_token = ?", tok); err != nil {
			return err
		}
	}
	return nil
}

// galeraTx is an explicit transaction of a fenced UPDATE and INSERT.
func galeraTx(ctx context.Context, c *sql.Conn, shape fenceShape, id int) (ok bool, err error) {
	if _, err := c.ExecContext(ctx, "START TRANSACTION"); err != nil {
		return false, err
	}
	defer func() {
		if err != nil || !ok {
			c.ExecContext(context.Background(), "ROLLBACK")
		}
	}()
	for _, insert := range []bool{false, true} {
		if ok, _, err = shape.write(ctx, c, insert, true, id); err != nil || !ok {
			return ok, err
		}
	}
	if _, err := c.ExecContext(ctx, "COMMIT"); err != nil {
		return false, err
	}
	return true, nil
}

// commitOrder is what node 3's binary log says about a race.
type commitOrder struct {
	writes    int // row changes of runs and events
	stale     int // of those, with a token older than a takeover committed before them
	takeovers int
	// tokens: the lease's token after each takeover, in log order.
	tokens []int64
	// late: takeovers found after the marker (read only when the log
	// before it lacked some the taker saw succeed), with their GTIDs.
	late []string
	// staleTakeovers: takeovers followed by at least one stale write.
	staleTakeovers int
}

// galeraBinlogPos is node 3's current binary log position.
func galeraBinlogPos(t *testing.T, c *dbserver.Cluster) gomysql.Position {
	t.Helper()
	db := dbtest.Open(t, c.BinlogNode().RootDSN(""))
	var file string
	var pos uint32
	var ignore1, ignore2 any
	if err := db.QueryRow("SHOW MASTER STATUS").Scan(&file, &pos, &ignore1, &ignore2); err != nil {
		t.Fatal(err)
	}
	return gomysql.Position{Name: file, Pos: pos}
}

// readCommitOrder streams node 3's binary log from `from` until the row
// that root inserts into schema.marker now, and checks every write to runs
// and events against the lease's token at that point of the log.
func readCommitOrder(t *testing.T, c *dbserver.Cluster, root *sql.DB, schema string, from gomysql.Position, firstToken int64, taken []int64) commitOrder {
	t.Helper()
	mustExec(t, root, "INSERT INTO marker VALUES (1)")
	wanted := map[int64]bool{}
	for _, tok := range taken {
		wanted[tok] = true
	}
	node := c.BinlogNode()
	cfg, err := mysql.ParseDSN(node.RootDSN(""))
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(node.Addr)
	p, _ := strconv.Atoi(port)
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: 900 + uint32(rand.IntN(1000)), Flavor: gomysql.MariaDBFlavor,
		Host: host, Port: uint16(p), User: cfg.User, Password: cfg.Passwd,
		MaxReconnectAttempts: 1, DisableRetrySync: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	defer syncer.Close()
	stream, err := syncer.StartSync(from)
	if err != nil {
		t.Fatalf("binlog of node 3: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out commitOrder
	var gtid gomysql.MariadbGTID
	afterMarker := false
	token := firstToken
	staleSinceTakeover := false
	for {
		ev, err := stream.GetEvent(ctx)
		if err != nil {
			t.Fatalf("binlog of node 3 after %d writes: %v", out.writes, err)
		}
		if g, ok := ev.Event.(*replication.MariadbGTIDEvent); ok {
			gtid = g.GTID
		}
		re, ok := ev.Event.(*replication.RowsEvent)
		if !ok || string(re.Table.Schema) != schema {
			continue
		}
		rows := re.Rows
		update := false
		switch ev.Header.EventType {
		case replication.UPDATE_ROWS_EVENTv1, replication.UPDATE_ROWS_EVENTv2, replication.PARTIAL_UPDATE_ROWS_EVENT:
			update = true
		case replication.WRITE_ROWS_EVENTv1, replication.WRITE_ROWS_EVENTv2:
		default:
			continue
		}
		for i := 0; i < len(rows); i++ {
			row := rows[i]
			if update { // before and after images alternate
				i++
				row = rows[i]
			}
			switch string(re.Table.Table) {
			case "marker":
				if afterMarker || len(out.tokens) == len(taken) {
					return out
				}
				// Some takeover the taker saw commit is not in the log before
				// the marker: read on to a second marker, written on the
				// taker's node, to say where it went.
				afterMarker = true
				n2 := dbtest.Open(t, c.Nodes[1].RootDSN(schema))
				mustExec(t, n2, "INSERT INTO marker VALUES (2)")
			case "fenced_job_leases":
				if nt := toInt64(t, row[2]); nt != token {
					if nt < token {
						t.Errorf("the lease's token went back from %d to %d", token, nt)
					}
					token = nt
					staleSinceTakeover = false
					if afterMarker {
						out.late = append(out.late, fmt.Sprintf("%d (GTID %s)", nt, gtid.String()))
						continue
					}
					out.takeovers++
					out.tokens = append(out.tokens, nt)
					if !wanted[nt] {
						t.Errorf("the binary log shows a takeover to %d (GTID %s) that the taker did not see succeed", nt, gtid.String())
					}
				}
			case "runs", "events":
				out.writes++
				if toInt64(t, row[1]) < token {
					out.stale++
					if !staleSinceTakeover {
						out.staleTakeovers++
						staleSinceTakeover = true
					}
				}
			}
		}
	}
}

// checkTakeoverCount holds the binary log's takeovers against the taker's,
// token by token, which shows the log before the marker was read whole:
// every takeover the taker saw succeed must be there, in token order (the
// taker's OK comes after Galera ordered its write set, and the marker is
// written after the last OK, so it is ordered after every takeover).
func checkTakeoverCount(t *testing.T, order commitOrder, counts *raceCounts) {
	t.Helper()
	taken := counts.taken()
	if !slices.Equal(order.tokens, taken) {
		var missing []int64
		for _, tok := range taken {
			if !slices.Contains(order.tokens, tok) {
				missing = append(missing, tok)
			}
		}
		t.Errorf("the binary log before the marker shows %d takeovers, the taker made %d; missing %v; found after the marker: %v",
			len(order.tokens), len(taken), missing, order.late)
	}
}

func toInt64(t *testing.T, v any) int64 {
	t.Helper()
	switch x := v.(type) {
	case int64:
		return x
	case uint64:
		return int64(x)
	case int32:
		return int64(x)
	case uint32:
		return int64(x)
	}
	t.Fatalf("binlog value %v (%T) is not an integer", v, v)
	return 0
}

func wsrepCounter(t *testing.T, s *dbserver.Server, name string) int64 {
	t.Helper()
	db := dbtest.Open(t, s.RootDSN(""))
	st, err := dbserver.WsrepStatus(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.ParseInt(st[name], 10, 64)
	return n
}

// TestGaleraFenceShapesRace measures each candidate shape in the
// cross-node race. The safe shapes must let no stale write commit; the
// lock-only shape, known to be unsafe on Galera, must be caught letting
// one through, which shows the race and its commit-order check can see
// the hole they look for.
func TestGaleraFenceShapesRace(t *testing.T) {
	c := dbtest.SharedGalera(t)
	d := galeraRaceDuration(t)
	for _, shape := range galeraShapes {
		t.Run(shape.name, func(t *testing.T) {
			schema, root := galeraRaceSchema(t, c)
			from := galeraBinlogPos(t, c)
			replays := wsrepCounter(t, c.Nodes[0], "wsrep_local_replays")
			d := d
			if !shape.safe {
				// Its stale commits show within seconds; CI's time goes to the safe shapes.
				d = min(d, 10*time.Second)
			}
			began := time.Now()
			counts := runGaleraRace(t, c, c.Nodes[0].DSN(dbserver.AppUser, dbserver.AppPassword, schema), shape, d)
			elapsed := time.Since(began)
			order := readCommitOrder(t, c, root, schema, from, 1, counts.taken())
			replays = wsrepCounter(t, c.Nodes[0], "wsrep_local_replays") - replays
			t.Logf("%s, %s: clients: %d committed, %d rejected by the fence, %d conflicts (1213), %d takeovers (%d retried on 1213); "+
				"node 3's binary log: %d row writes, %d with token t after the takeover to t+1 (after %d of %d takeovers); node 1 replays: %d; slowest write %s, slowest takeover %s",
				shape.name, elapsed.Round(time.Second), counts.committed.Load(), counts.rejected.Load(), counts.conflicts.Load(),
				counts.takeovers.Load(), counts.takeoverRetries.Load(), order.writes, order.stale, order.staleTakeovers, order.takeovers, replays,
				time.Duration(counts.slowestWrite.Load())*time.Microsecond, time.Duration(counts.slowestTakeover.Load())*time.Microsecond)
			checkTakeoverCount(t, order, counts)
			if order.writes == 0 || order.takeovers == 0 {
				t.Fatalf("no race: %d writes, %d takeovers", order.writes, order.takeovers)
			}
			switch {
			case shape.safe && order.stale > 0:
				t.Errorf("%d writes with token t committed after the takeover to t+1", order.stale)
			case !shape.safe && order.stale == 0:
				t.Errorf("the lock-only shape let no stale write through in %s: the race no longer reproduces the hole it checks for", d)
			}
		})
	}
}

// writeVerbatim is what an application sends through the proxy: the
// statement as written; the proxy adds the guard.
func writeVerbatim(ctx context.Context, c *sql.Conn, insert, _ bool, id int) (bool, int64, error) {
	q, args := plainUpdate, []any{id}
	if insert {
		q, args = plainInsert, nil
	}
	r, err := c.ExecContext(ctx, q, args...)
	if err != nil {
		return false, 0, err
	}
	n, _ := r.RowsAffected()
	return n > 0, n, nil
}

// TestGaleraProxyRace is the race of issue 9 through the proxy: writers
// send plain UPDATEs, INSERTs and transactions of both through a proxy in
// front of node 1 (engine learned at connect), takeovers commit on node 2,
// and node 3's binary log must show no write with token t committed after
// the takeover to t+1. Conflicts (1213) are the engine's errors to the
// writers and audited as such.
func TestGaleraProxyRace(t *testing.T) {
	c := dbtest.SharedGalera(t)
	d := galeraRaceDuration(t)
	schema, root := galeraRaceSchema(t, c)
	tp := startProxy(t, c.Nodes[0].Addr, "tables:\n  - name: "+schema+".runs\n  - name: "+schema+".events\n")
	from := galeraBinlogPos(t, c)
	began := time.Now()
	counts := runGaleraRace(t, c, tp.DSN(dbserver.AppUser, dbserver.AppPassword, schema), fenceShape{name: "proxy", safe: true, write: writeVerbatim}, d)
	elapsed := time.Since(began)
	order := readCommitOrder(t, c, root, schema, from, 1, counts.taken())
	rejected := testutilCounter(t, tp.Reg, "fenceproxy_stale_writes_rejected_total")
	t.Logf("through the proxy, %s: clients: %d committed, %d rejected, %d conflicts (1213), %d takeovers (%d retried); "+
		"node 3's binary log: %d row writes, %d with token t after the takeover to t+1; proxy: %v rejections and conflicts counted; "+
		"slowest write %s, slowest takeover %s",
		elapsed.Round(time.Second), counts.committed.Load(), counts.rejected.Load(), counts.conflicts.Load(), counts.takeovers.Load(),
		counts.takeoverRetries.Load(), order.writes, order.stale, rejected,
		time.Duration(counts.slowestWrite.Load())*time.Microsecond, time.Duration(counts.slowestTakeover.Load())*time.Microsecond)
	if order.writes == 0 || order.takeovers == 0 {
		t.Fatalf("no race: %d writes, %d takeovers", order.writes, order.takeovers)
	}
	checkTakeoverCount(t, order, counts)
	if order.stale > 0 {
		t.Errorf("%d writes with token t committed after the takeover to t+1", order.stale)
	}
	if want := float64(counts.rejected.Load() + counts.conflicts.Load()); rejected < want {
		t.Errorf("the proxy counted %v rejections and conflicts, the writers saw %v", rejected, want)
	}
	// Every record names the writers' lease (from @fence_lease), whichever
	// of the proxy's statements met the 1213, and none says lease_missing:
	// the lease row always exists.
	const rejections = "fenceproxy_stale_writes_rejected_total"
	if n := series(t, tp.Reg, rejections, map[string]string{"lease": "job"}); n != rejected {
		t.Errorf("%v of %v rejections and conflicts counted under lease job", n, rejected)
		for _, r := range tp.Audit.Recent(1000) {
			if r.Lease != "job" {
				t.Logf("record under another lease: %+v", r)
			}
		}
	}
	if n := series(t, tp.Reg, rejections, map[string]string{"reason": "lease_missing"}); n != 0 {
		t.Errorf("%v writes counted as lease_missing", n)
	}
	conflicts := series(t, tp.Reg, rejections, map[string]string{"reason": "conflict"})
	t.Logf("proxy: %v conflicts, %v stale_token", conflicts, series(t, tp.Reg, rejections, map[string]string{"reason": "stale_token"}))
}

// BenchmarkGaleraFenceCost measures one autocommit write on node 1 per
// shape, with no contention: go test -run '^$' -bench GaleraFenceCost
// -benchtime 2000x ./integration/. p50-µs and p99-µs are per write.
func BenchmarkGaleraFenceCost(b *testing.B) {
	c := dbtest.SharedGalera(b)
	shapes := append([]fenceShape{{name: "unfenced", write: func(ctx context.Context, c *sql.Conn, insert, _ bool, id int) (bool, int64, error) {
		q, args := plainUpdate, []any{id}
		if insert {
			q, args = plainInsert, nil
		}
		r, err := c.ExecContext(ctx, q, args...)
		if err != nil {
			return false, 0, err
		}
		n, _ := r.RowsAffected()
		return n > 0, n, nil
	}}}, galeraShapes...)
	for _, shape := range shapes {
		for _, insert := range []bool{false, true} {
			kind := "update"
			if insert {
				kind = "insert"
			}
			b.Run(shape.name+"/"+kind, func(b *testing.B) {
				name := dbtest.NewDatabase(b, c.Nodes[0])
				root := dbtest.Open(b, c.Nodes[0].RootDSN(name))
				for _, q := range []string{
					"CREATE TABLE fenced_job_leases (lease_name VARCHAR(191) NOT NULL PRIMARY KEY, owner_token VARBINARY(64) NOT NULL, fence_token BIGINT UNSIGNED NOT NULL, leased_until TIMESTAMP(3) NOT NULL, fence_writes BIGINT UNSIGNED NOT NULL DEFAULT 0) ENGINE=InnoDB",
					"CREATE TABLE runs (id INT PRIMARY KEY, tok BIGINT NOT NULL, n BIGINT NOT NULL) ENGINE=InnoDB",
					"CREATE TABLE events (id BIGINT AUTO_INCREMENT PRIMARY KEY, tok BIGINT NOT NULL) ENGINE=InnoDB",
					"INSERT INTO runs VALUES (1, 0, 0)",
					"INSERT INTO fenced_job_leases (lease_name, owner_token, fence_token, leased_until) VALUES ('job', 'owner-a', 1, SYSDATE(3) + INTERVAL 1 DAY)",
				} {
					mustExec(b, root, q)
				}
				db := dbtest.Open(b, c.Nodes[0].DSN(dbserver.AppUser, dbserver.AppPassword, name))
				conn, err := db.Conn(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Close()
				mustExec(b, conn, "SET @fence_lease = 'job', @fence_owner = 'owner-a', @fence_token = 1")
				lat := make([]time.Duration, 0, b.N)
				ctx := context.Background()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					start := time.Now()
					ok, _, err := shape.write(ctx, conn, insert, false, 1)
					lat = append(lat, time.Since(start))
					if err != nil || !ok {
						b.Fatalf("write %d: ok=%v err=%v", i, ok, err)
					}
				}
				b.StopTimer()
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			})
		}
	}
}
