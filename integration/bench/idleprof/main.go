// Command idleprof runs a fenceproxy in its own process and, once -n client
// connections are open and have been idle for -settle, reports what they
// hold in it: heap and stack in use, goroutines, per connection, and writes
// a heap profile (go tool pprof -inuse_space) and a goroutine profile.
// Clients come from elsewhere (integration/bench/conns), so that nothing
// but the proxy is measured:
//
//	go run ./integration/bench/idleprof -config fp.yaml -n 5000 -out /tmp/prof &
//	conns -addr 127.0.0.1:6033 -n 5000 -time 30s
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy"
)

func main() {
	config := flag.String("config", "", "fenceproxy configuration (listen, backend)")
	n := flag.Int("n", 5000, "connections to wait for")
	settle := flag.Duration("settle", 2*time.Second, "how long they must be open before measuring")
	out := flag.String("out", ".", "directory for heap.pprof and goroutines.txt")
	flag.Parse()
	cfg, err := policy.Load(*config)
	if err != nil {
		log.Fatal(err)
	}
	p, err := proxy.New(cfg, cfg.Policy(1), proxy.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		log.Fatal(err)
	}
	ln, err := proxy.Listen(cfg.Listen)
	if err != nil {
		log.Fatal(err)
	}
	go p.Serve(ln)

	runtime.GC()
	base := stats()
	for p.ActiveConnections() < *n {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(*settle)
	idle := stats()
	runtime.GC()
	runtime.GC()
	collected := stats()
	conns := p.ActiveConnections()
	per := func(a, b uint64) float64 { return (float64(a) - float64(b)) / float64(conns) / 1024 }
	fmt.Printf("connections\t%d\n", conns)
	fmt.Printf("goroutines per connection\t%.2f\n", float64(idle.goroutines-base.goroutines)/float64(conns))
	for _, s := range []struct {
		name string
		at   memStats
	}{{"idle", idle}, {"idle, after GC", collected}} {
		fmt.Printf("%s: KiB per connection\theap in use %.1f\theap live %.1f\tstacks %.1f\truntime total (Sys-HeapReleased) %.1f\n", s.name,
			per(s.at.HeapInuse, base.HeapInuse), per(s.at.HeapAlloc, base.HeapAlloc), per(s.at.StackInuse, base.StackInuse),
			per(s.at.Sys-s.at.HeapReleased, base.Sys-base.HeapReleased))
	}
	write := func(name string, f func(io.Writer) error) {
		fh, err := os.Create(filepath.Join(*out, name))
		if err != nil {
			log.Fatal(err)
		}
		defer fh.Close()
		if err := f(fh); err != nil {
			log.Fatal(err)
		}
	}
	write("heap.pprof", pprof.WriteHeapProfile)
	write("goroutines.txt", func(w io.Writer) error { return pprof.Lookup("goroutine").WriteTo(w, 1) })
	// Serve the clients to the end of their run.
	for p.ActiveConnections() > 0 {
		time.Sleep(50 * time.Millisecond)
	}
	p.Close()
}

type memStats struct {
	runtime.MemStats
	goroutines int
}

func stats() memStats {
	var m memStats
	runtime.ReadMemStats(&m.MemStats)
	m.goroutines = runtime.NumGoroutine()
	return m
}
