// Command conns opens many connections to a MySQL-protocol address at once
// and reports what they cost the process behind it: its resident memory per
// connection while they are open and idle, and the throughput and latency
// of all of them querying at once. integration/bench/table.sh runs it.
//
//	go run ./integration/bench/conns -addr 127.0.0.1:6033 -pid PID -n 5000
//
// It prints one tab-separated line: label, connections, RSS before (KiB),
// RSS idle (KiB), KiB per idle connection, RSS active (KiB), KiB per active
// connection, queries/s, p50 ms, p99 ms, errors.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6033", "address to connect to")
	pid := flag.Int("pid", 0, "process whose resident memory to report (0: none)")
	n := flag.Int("n", 5000, "connections")
	dur := flag.Duration("time", 6*time.Second, "how long all connections query at once")
	user := flag.String("user", "app", "user")
	password := flag.String("password", "apppw", "password")
	db := flag.String("db", "sbtest", "database with sbtest1")
	rows := flag.Int("table-size", 50000, "rows in sbtest1")
	label := flag.String("label", "", "name printed first (default: addr)")
	parallel := flag.Int("parallel", 32, "connections opened at a time")
	idleFor := flag.Duration("idle", time.Second, "how long all connections stay idle before the idle RSS is read")
	flag.Parse()
	if *label == "" {
		*label = *addr
	}
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = *user, *password, "tcp", *addr, *db
	cfg.Timeout = 30 * time.Second
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		log.Fatal(err)
	}
	pool := sql.OpenDB(connector)
	pool.SetMaxIdleConns(*n)
	pool.SetMaxOpenConns(*n)
	ctx := context.Background()

	before := rss(*pid)
	conns := make([]*sql.Conn, *n)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, *parallel)
	for range *parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= *n {
					return
				}
				c, err := pool.Conn(ctx)
				if err == nil {
					// A real login and one round trip: the connection is
					// established on both hops before it counts.
					err = c.PingContext(ctx)
				}
				if err != nil {
					errs <- fmt.Errorf("connection %d: %w", i, err)
					return
				}
				conns[i] = c
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		log.Fatal(err)
	}
	time.Sleep(*idleFor) // let the process settle: what stays is what idle connections cost
	idle := rss(*pid)

	// Active: every connection runs point selects back to back.
	var queries, failures atomic.Int64
	lat := make([][]time.Duration, *n)
	deadline := time.Now().Add(*dur)
	start := time.Now()
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), 1))
			var buf strings.Builder
			var v string
			for time.Now().Before(deadline) {
				buf.Reset()
				buf.WriteString("SELECT c FROM sbtest1 WHERE id=")
				buf.WriteString(strconv.Itoa(1 + r.IntN(*rows)))
				t := time.Now()
				if err := c.QueryRowContext(ctx, buf.String()).Scan(&v); err != nil {
					if failures.Add(1) == 1 {
						log.Printf("%s: first failed query: %v", *label, err)
					}
					continue
				}
				lat[i] = append(lat[i], time.Since(t))
				queries.Add(1)
			}
		}()
	}
	// Sample while all of them are busy, not after they stopped.
	time.Sleep(*dur / 2)
	active := rss(*pid)
	wg.Wait()
	elapsed := time.Since(start)
	for _, c := range conns {
		c.Close()
	}
	pool.Close()

	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	pct := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[min(len(all)-1, int(float64(len(all))*p))].Microseconds()) / 1000
	}
	per := func(kib int64) float64 { return float64(kib-before) / float64(*n) }
	fmt.Printf("%s\t%d\t%d\t%d\t%.1f\t%d\t%.1f\t%.0f\t%.2f\t%.2f\t%d\n", *label, *n, before, idle, per(idle), active, per(active),
		float64(queries.Load())/elapsed.Seconds(), pct(0.50), pct(0.99), failures.Load())
}

// rss is pid's resident set size in KiB (0 for pid 0).
func rss(pid int) int64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		log.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				log.Fatal(err)
			}
			return kib
		}
	}
	log.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}
