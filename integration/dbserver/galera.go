package dbserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/mysqld"
)

// galeraProviders are where distributions put the Galera 4 library
// (Debian's galera-4 package: /usr/lib/galera/libgalera_smm.so).
var galeraProviders = []string{
	"/usr/lib/galera/libgalera_smm.so",
	"/usr/lib/galera-4/libgalera_smm.so",
	"/usr/lib64/galera-4/libgalera_smm.so",
	"/usr/lib64/galera/libgalera_smm.so",
	"/usr/lib/libgalera_smm.so",
}

// nodeReadyTimeout bounds the wait for one node's socket: a joiner opens it
// only after its state transfer, and donors serve joiners one at a time.
const nodeReadyTimeout = 2 * time.Minute

// galeraLogFileSize keeps the copied datadirs small (InnoDB's default redo
// log is 96 MiB, copied once per node).
const galeraLogFileSize = "--innodb-log-file-size=16M"

// ClusterOptions says how to start a Galera cluster.
type ClusterOptions struct {
	// Nodes is the cluster size (default 3).
	Nodes int
	// BinlogNode is the 1-based node that keeps a row-format binary log of
	// everything the cluster commits (log_slave_updates), in commit order;
	// 0: no node has one.
	BinlogNode int
}

// Cluster is a running MariaDB Galera cluster on loopback. Every node is a
// Server with the same accounts as a single server (root with a password
// over TCP, AppUser).
type Cluster struct {
	Nodes []*Server
	Dir   string // holds every node's dir
	Name  string // wsrep_cluster_name

	// Startup is how long StartGalera took, for reports.
	Startup time.Duration

	closeOnce sync.Once
	closeErr  error
}

// galeraSetup is what a cluster start needs besides the server binary.
type galeraSetup struct {
	provider string
	user     string // --user for the nodes ("" = this process's own)
	uid, gid int    // owner of the node dirs; -1 = leave as created
}

// FindGalera returns the Galera provider library, checking that what a
// joining node needs is installed too (the rsync state transfer script,
// rsync, and ss or lsof, which that script uses to see its rsync daemon
// listen). A missing piece is an error wrapping ErrNotFound that names the
// Debian packages to install.
func FindGalera() (string, error) {
	provider := ""
	for _, p := range galeraProviders {
		if _, err := os.Stat(p); err == nil {
			provider = p
			break
		}
	}
	var missing []string
	if provider == "" {
		missing = append(missing, "the Galera provider libgalera_smm.so (looked in "+strings.Join(galeraProviders, ", ")+")")
	}
	if _, err := exec.LookPath("rsync"); err != nil {
		missing = append(missing, "rsync")
	}
	if !haveAny("wsrep_sst_rsync") {
		missing = append(missing, "wsrep_sst_rsync (from mariadb-server)")
	}
	if !haveAny("ss", "lsof", "sockstat") {
		missing = append(missing, "ss or lsof")
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("%w for a Galera cluster: missing %s: install them, e.g. `apt-get install mariadb-server galera-4 rsync iproute2`",
			ErrNotFound, strings.Join(missing, "; "))
	}
	return provider, nil
}

func haveAny(names ...string) bool {
	for _, n := range names {
		if _, err := exec.LookPath(n); err == nil {
			return true
		}
		for _, dir := range append([]string{"/usr/bin", "/bin"}, mysqld.SearchDirs...) {
			if mysqld.IsExecutable(filepath.Join(dir, n)) {
				return true
			}
		}
	}
	return false
}

// galeraUser decides who the nodes run as. As root they run as the mysql
// account: the rsync daemon of a state transfer started by root drops to
// an unprivileged user and cannot read the datadir (EACCES).
func galeraUser() (galeraSetup, error) {
	if os.Geteuid() != 0 {
		return galeraSetup{uid: -1, gid: -1}, nil
	}
	u, err := user.Lookup("mysql")
	if err != nil {
		return galeraSetup{}, fmt.Errorf("dbserver: Galera nodes started by root run as user mysql, which does not exist (%v): install mariadb-server, which creates it", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return galeraSetup{user: "mysql", uid: uid, gid: gid}, nil
}

// StartGalera starts a Galera cluster of MariaDB nodes on 127.0.0.1, each
// with random ports, and returns once every node reports the full cluster
// size, wsrep_ready=ON and Synced. ctx bounds the start only.
//
// How: one datadir is initialized and booted once as a one-node cluster
// (so that InnoDB records a Galera position) and gets the accounts; then it
// is copied to every node. Node 1 bootstraps the cluster from that state,
// the others join with the same state, so their state transfer is the
// incremental one (IST) of a few membership events with an rsync "bypass"
// SST, not a copy of the data. That saves two datadir initializations and
// lets a node keep a binary log from its first start (a full rsync SST
// would overwrite it).
func StartGalera(ctx context.Context, opts ClusterOptions) (_ *Cluster, err error) {
	began := time.Now()
	n := opts.Nodes
	if n == 0 {
		n = 3
	}
	if n < 1 || opts.BinlogNode < 0 || opts.BinlogNode > n {
		return nil, fmt.Errorf("dbserver: bad cluster options %+v", opts)
	}
	if err := checkTier(); err != nil {
		return nil, err
	}
	binary, err := Find()
	if err != nil {
		return nil, err
	}
	bin, err := mysqld.Inspect(binary)
	if err != nil {
		return nil, err
	}
	if bin.Flavor != FlavorMariaDB {
		return nil, fmt.Errorf("%w: a Galera cluster needs mariadbd, found %s", ErrNotFound, binary)
	}
	setup, err := galeraUser()
	if err != nil {
		return nil, err
	}
	if setup.provider, err = FindGalera(); err != nil {
		return nil, err
	}
	dir, err := makeClusterDir()
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir, Name: filepath.Base(dir)}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()

	seed, err := c.prepareSeed(ctx, bin, setup)
	if err != nil {
		return nil, err
	}

	ports := make([][3]int, n) // galera (gcomm), IST, SST
	var members []string
	for i := range ports {
		for j := range ports[i] {
			if ports[i][j], err = mysqld.FreePort(); err != nil {
				return nil, err
			}
		}
		members = append(members, net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[i][0])))
	}
	address := "gcomm://" + strings.Join(members, ",")
	for i := 0; i < n; i++ {
		nodeDir := filepath.Join(dir, "node"+strconv.Itoa(i+1))
		datadir := filepath.Join(nodeDir, "data")
		if err := copyTree(seed.datadir, datadir); err != nil {
			return nil, fmt.Errorf("dbserver: copying the seed datadir: %w", err)
		}
		// galera.cache is the seed's write-set cache: each node makes its own.
		os.Remove(filepath.Join(datadir, "galera.cache"))
		if i > 0 {
			if err := setSafeToBootstrap(datadir, false); err != nil {
				return nil, err
			}
		}
		if _, err := mysqld.PrivateTmp(nodeDir); err != nil {
			return nil, err
		}
		if err := chownTree(nodeDir, setup); err != nil {
			return nil, err
		}
		p := &mysqld.Process{
			Dir: nodeDir, LogFile: filepath.Join(nodeDir, "error.log"),
			Binlog: opts.BinlogNode == i+1,
			User:   setup.user, SocketPassword: seed.password, ReadyTimeout: nodeReadyTimeout,
		}
		p.Args = galeraArgs(setup.provider, c.Name, "node"+strconv.Itoa(i+1), address, ports[i])
		if i == 0 {
			p.Args = append(p.Args, "--wsrep-new-cluster")
		}
		if p.Binlog {
			p.Args = append(p.Args, "--log-slave-updates=ON")
		}
		s := &Server{Dir: nodeDir, Flavor: seed.srv.Flavor, Version: seed.srv.Version, proc: p}
		c.Nodes = append(c.Nodes, s)
	}

	// Node 1 first: the joiners need a primary component to join.
	if err := c.Nodes[0].launch(ctx, bin); err != nil {
		return nil, fmt.Errorf("dbserver: galera node 1: %w", err)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			s := c.Nodes[i]
			if err := s.launch(ctx, bin); err != nil {
				errs[i] = fmt.Errorf("dbserver: galera node %d: %w", i+1, err)
			}
		}(i)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, s := range c.Nodes {
		s.rootCfg = seed.srv.rootCfg.Clone()
		s.rootCfg.Addr = s.Addr
	}
	if err := c.awaitSynced(ctx); err != nil {
		return nil, err
	}
	c.Startup = time.Since(began)
	return c, nil
}

// launch starts the node's process on its datadir (Dir/data).
func (s *Server) launch(ctx context.Context, bin mysqld.Binary) error {
	if err := s.proc.Launch(ctx, bin, filepath.Join(s.Dir, "data")); err != nil {
		return err
	}
	s.Addr = s.proc.Addr
	return nil
}

// galeraArgs are a node's wsrep options. ports: gcomm, IST, SST.
func galeraArgs(provider, cluster, node, address string, ports [3]int) []string {
	host := "127.0.0.1"
	gcomm := net.JoinHostPort(host, strconv.Itoa(ports[0]))
	return []string{
		galeraLogFileSize,
		"--binlog-format=ROW",
		"--innodb-autoinc-lock-mode=2",
		"--wsrep-on=ON",
		"--wsrep-provider=" + provider,
		"--wsrep-cluster-name=" + cluster,
		"--wsrep-node-name=" + node,
		"--wsrep-cluster-address=" + address,
		"--wsrep-node-address=" + gcomm,
		"--wsrep-provider-options=gmcast.listen_addr=tcp://" + gcomm +
			";ist.recv_addr=" + net.JoinHostPort(host, strconv.Itoa(ports[1])) + ";gcache.size=32M",
		"--wsrep-sst-method=rsync",
		"--wsrep-sst-receive-address=" + net.JoinHostPort(host, strconv.Itoa(ports[2])),
	}
}

// seedState is the booted-once datadir every node starts from.
type seedState struct {
	datadir  string
	srv      *Server // stopped; its rootCfg and Version stay valid for the nodes
	password string  // root's
}

// prepareSeed initializes a datadir, boots it once as a one-node cluster,
// creates the accounts, and shuts it down cleanly.
func (c *Cluster) prepareSeed(ctx context.Context, bin mysqld.Binary, setup galeraSetup) (*seedState, error) {
	seedDir := filepath.Join(c.Dir, "seed")
	datadir := filepath.Join(seedDir, "data")
	if err := os.Mkdir(seedDir, 0o700); err != nil {
		return nil, err
	}
	if _, err := mysqld.PrivateTmp(seedDir); err != nil {
		return nil, err
	}
	if err := chownTree(c.Dir, setup); err != nil {
		return nil, err
	}
	if err := mysqld.Initialize(ctx, bin, datadir, seedDir, setup.user, galeraLogFileSize); err != nil {
		return nil, err
	}
	if err := chownTree(seedDir, setup); err != nil {
		return nil, err
	}
	ports := [3]int{}
	for i := range ports {
		p, err := mysqld.FreePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	p := &mysqld.Process{Dir: seedDir, LogFile: filepath.Join(seedDir, "error.log"), User: setup.user}
	p.Args = append(galeraArgs(setup.provider, c.Name, "seed", "gcomm://", ports), "--wsrep-new-cluster")
	s := &Server{Dir: seedDir, Flavor: bin.Flavor, proc: p}
	if err := s.launch(ctx, bin); err != nil {
		return nil, fmt.Errorf("dbserver: galera seed: %w", err)
	}
	acc, err := mysqld.SetupAccounts(ctx, p)
	if err != nil {
		p.Stop()
		return nil, fmt.Errorf("dbserver: galera seed accounts: %w\nerror log:\n%s", err, s.ErrorLog())
	}
	s.rootCfg, s.Version, s.Flavor = acc.Root, acc.Version, acc.Flavor
	if err := p.Stop(); err != nil {
		return nil, err
	}
	state, err := os.ReadFile(filepath.Join(datadir, "grastate.dat"))
	if err != nil {
		return nil, fmt.Errorf("dbserver: galera seed left no saved state: %w", err)
	}
	if !strings.Contains(string(state), "safe_to_bootstrap: 1") {
		return nil, fmt.Errorf("dbserver: galera seed did not shut down cleanly:\n%s", state)
	}
	return &seedState{datadir: datadir, srv: s, password: s.rootCfg.Passwd}, nil
}

// setSafeToBootstrap rewrites grastate.dat's safe_to_bootstrap: only the
// bootstrapping node may say 1.
func setSafeToBootstrap(datadir string, safe bool) error {
	p := filepath.Join(datadir, "grastate.dat")
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	from, to := "safe_to_bootstrap: 1", "safe_to_bootstrap: 0"
	if safe {
		from, to = to, from
	}
	return os.WriteFile(p, []byte(strings.Replace(string(data), from, to, 1)), 0o660)
}

// awaitSynced waits until every node sees the whole cluster and is ready.
func (c *Cluster) awaitSynced(ctx context.Context) error {
	want := strconv.Itoa(len(c.Nodes))
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var last string
		ok := true
		for i, s := range c.Nodes {
			st, err := s.wsrepStatus(ctx)
			if err != nil || st["wsrep_cluster_size"] != want || st["wsrep_ready"] != "ON" || st["wsrep_local_state_comment"] != "Synced" {
				ok = false
				last = fmt.Sprintf("node %d: %v %v", i+1, st, err)
				break
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("dbserver: galera cluster not synced: %w (%s)", ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// wsrepStatus returns the node's wsrep_% status variables.
func (s *Server) wsrepStatus(ctx context.Context) (map[string]string, error) {
	db, err := s.openRoot()
	if err != nil {
		return nil, err
	}
	defer db.Close()
	return WsrepStatus(ctx, db)
}

// WsrepStatus returns the wsrep_% status variables db's server reports.
func WsrepStatus(ctx context.Context, db interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}) (map[string]string, error) {
	rows, err := db.QueryContext(ctx, "SHOW GLOBAL STATUS LIKE 'wsrep%'")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	st := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		st[k] = v
	}
	return st, rows.Err()
}

// Close stops every node (in parallel: each leaves the cluster on SIGTERM)
// and removes Dir. Safe to call twice.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		errs := make([]error, len(c.Nodes))
		var wg sync.WaitGroup
		for i, s := range c.Nodes {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = s.Close() }()
		}
		wg.Wait()
		if err := os.RemoveAll(c.Dir); err != nil {
			errs = append(errs, err)
		}
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}

// ErrorLogs returns the last lines of every node's error log, for failure
// messages.
func (c *Cluster) ErrorLogs() string {
	var b strings.Builder
	for i, s := range c.Nodes {
		fmt.Fprintf(&b, "--- node %d (%s)\n%s\n", i+1, s.Addr, s.ErrorLog())
	}
	return b.String()
}

// BinlogNode returns the node with a binary log (ClusterOptions.BinlogNode),
// or nil.
func (c *Cluster) BinlogNode() *Server {
	for _, s := range c.Nodes {
		if s.proc != nil && s.proc.Binlog {
			return s
		}
	}
	return nil
}

// makeClusterDir creates the cluster's temp dir under /tmp when running as
// root: the nodes run as mysql and must reach their dirs through every
// parent, which a TMPDIR under /root does not allow.
func makeClusterDir() (string, error) {
	parent := ""
	if os.Geteuid() == 0 {
		parent = "/tmp"
	}
	dir, err := os.MkdirTemp(parent, "fp-galera-")
	if err == nil && len(dir) > 60 {
		os.RemoveAll(dir)
		dir, err = os.MkdirTemp("/tmp", "fp-galera-")
	}
	if err != nil {
		return "", fmt.Errorf("dbserver: temp dir: %w", err)
	}
	return dir, nil
}

// chownTree gives every file under root to the nodes' user.
func chownTree(root string, setup galeraSetup) error {
	if setup.uid < 0 {
		return nil
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, setup.uid, setup.gid)
	})
}

// copyTree copies the directory src to dst (which must not exist), keeping
// modes and, when permitted, owners.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.MkdirAll(target, fi.Mode().Perm()); err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			if err := copyFile(p, target, fi.Mode().Perm()); err != nil {
				return err
			}
		default:
			return nil // sockets, pid files' leftovers: not part of a datadir copy
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 {
			return os.Lchown(target, int(st.Uid), int(st.Gid))
		}
		return nil
	})
}

func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
