package integration

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"reflect"
	"strconv"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
)

// A replication client (CDC tools, a replica) streams the binary log
// through the proxy: COM_REGISTER_SLAVE, then COM_BINLOG_DUMP, after which
// the proxy pipes bytes both ways. The events it receives must be those a
// direct connection receives.
func TestBinlogStreamThroughProxy(t *testing.T) {
	if os.Getenv(dbtest.EnvDSN) != "" {
		t.Skip("needs a server with a binary log, which only the harness starts")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := dbserver.Start(ctx, dbserver.Options{Binlog: true})
	if err != nil {
		dbtest.Unavailable(t, err)
	}
	t.Cleanup(func() { srv.Close() })
	root := dbtest.Open(t, srv.RootDSN(""))
	for _, q := range []string{
		"CREATE DATABASE rep",
		"CREATE TABLE rep.t (id INT PRIMARY KEY, v VARCHAR(20))",
	} {
		if _, err := root.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	var file string
	var pos uint32
	var ignore1, ignore2 any
	if err := root.QueryRowContext(ctx, "SHOW MASTER STATUS").Scan(&file, &pos, &ignore1, &ignore2); err != nil {
		t.Fatal(err)
	}

	tp := startProxy(t, srv.Addr, "")
	rootCfg, err := mysql.ParseDSN(srv.RootDSN(""))
	if err != nil {
		t.Fatal(err)
	}
	stream := func(addr string, serverID uint32) *replication.BinlogStreamer {
		t.Helper()
		host, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
			ServerID: serverID, Flavor: gomysql.MariaDBFlavor,
			Host: host, Port: uint16(p), User: rootCfg.User, Password: rootCfg.Passwd,
			MaxReconnectAttempts: 1, DisableRetrySync: true,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		t.Cleanup(syncer.Close)
		s, err := syncer.StartSync(gomysql.Position{Name: file, Pos: pos})
		if err != nil {
			t.Fatalf("StartSync through %s: %v", addr, err)
		}
		return s
	}
	direct := stream(srv.Addr, 101)
	proxied := stream(tp.Addr, 102)

	for _, q := range []string{
		"INSERT INTO rep.t VALUES (1, 'first'), (2, 'second')",
		"UPDATE rep.t SET v = 'changed' WHERE id = 2",
		"DELETE FROM rep.t WHERE id = 1",
	} {
		if _, err := root.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}

	// The row events of the three statements, in order, as each client saw
	// them: event type and row values.
	rows := func(s *replication.BinlogStreamer) []string {
		t.Helper()
		var got []string
		for len(got) < 3 {
			ev, err := s.GetEvent(ctx)
			if err != nil {
				t.Fatalf("after %d row events: %v", len(got), err)
			}
			if re, ok := ev.Event.(*replication.RowsEvent); ok && string(re.Table.Schema) == "rep" {
				got = append(got, fmt.Sprintf("%v %v", ev.Header.EventType, re.Rows))
			}
		}
		return got
	}
	want := rows(direct)
	got := rows(proxied)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("row events through the proxy:\n%q\ndirect:\n%q", got, want)
	}
	if want[0] != "WriteRowsEventV1 [[1 first] [2 second]]" {
		t.Errorf("first row event = %q, want the INSERT's two rows", want[0])
	}
}
