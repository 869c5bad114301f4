package pgpool

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pgtx-go/pgtx/pgtxtest/internal/proc"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// Bounds of a Pgpool-II's steps.
const (
	pgpoolReadyTimeout = 30 * time.Second // from starting pgpool to every node up behind it
	pgpoolStopTimeout  = 10 * time.Second // after SIGINT, before SIGKILL
	pgpoolShowTimeout  = time.Minute      // one SHOW command, connection included
	pgpoolPCPTimeout   = 30 * time.Second // one PCP command, until pgpool shows its effect
	pgpoolDirPrefix    = "pgtx-pgtest-pgpool-"
	pgpoolDefaultPath  = "/usr/sbin/pgpool" // where the Debian package installs it
)

// Config configures a Pgpool-II. Zero fields mean the defaults in brackets.
type Config struct {
	NumInitChildren int // num_init_children, the client connections pgpool serves at once [8]
	MaxPool         int // max_pool, cached backend connections per child [4]
	// Extra holds any other pgpool.conf settings, name to value, written verbatim
	// after the kit's own (so they override them); a string value must carry its own
	// quotes, e.g. Extra{"failover_on_backend_error": "off", "backend_weight0": "0"}.
	// Overriding the addresses, ports, directories or logging breaks New's
	// readiness check or the DSNs.
	Extra map[string]string
}

// Node is one backend as SHOW POOL_NODES reports it.
type Node struct {
	ID     int    // node_id: 0 for the primary New was given, 1.. for the standbys
	Addr   string // host:port
	Status string // up, down, waiting (not connected to yet) or unused
	Role   string // primary or standby, as pgpool last found it
	// LoadBalanceNode tells whether pgpool sends the reads of the session that
	// asked, Nodes' own, to this node.
	LoadBalanceNode bool
	SelectCount     int64 // select_cnt, the SELECTs pgpool sent this node
}

// Process is one pgpool child as SHOW POOL_PROCESSES reports it.
type Process struct {
	PID      int
	Status   string // e.g. "Wait for connection", "Idle", "Execute command"
	Database string // the database of its cached connection, "" if none
	User     string // the user of its cached connection, "" if none
}

// Pgpool is a running Pgpool-II in streaming replication mode in front of a
// primary and its standbys, started by New.
//
// It listens on 127.0.0.1 only and lets every client in without a password
// (enable_pool_hba off, no pool_passwd), so the servers must do the same for
// their users, as the kit's local servers do. Writes, and every statement of a
// transaction after its first write, go to the primary; other reads are
// balanced across the nodes (weight 1 each). pgpool runs no health or
// replication check and no failover command. With its defaults it marks down a
// node it cannot connect to (failover_on_backend_error) and a primary that shuts
// down (failover_on_backend_shutdown), and then looks for the new primary itself;
// [Pgpool.PromoteNode] and [Pgpool.AttachNode] change its view of the nodes.
// Every statement it sends is logged to LogPath with the node it went to.
//
// Its methods are safe for concurrent use.
type Pgpool struct {
	primary *server.Server
	bin     string
	dir     string
	user    string // the servers' user: PCP user and sr_check_user
	port    int
	pcpPort int
	nodes   int                 // the number of backends
	cred    *syscall.Credential // nil when not root

	mu      sync.Mutex // serializes Restart and Stop
	proc    *proc.Process
	logFrom int64 // size of the log when the current run started
	stopped bool
	stopErr error
}

// New starts a Pgpool-II in front of primary (node 0) and standbys (nodes 1..),
// configured by cfg (nil: the defaults), waits until a query through it answers and
// every node is up behind it, and stops it in tb.Cleanup. Bad options, a server
// without a DSN, and a pgpool that does not start fail tb. When Pgpool-II is not
// installed the test is skipped with how to install it, except under CI=true where
// that is a failure; it is looked for in PGTX_TEST_PGPOOL, then PATH, then
// /usr/sbin/pgpool. A server reached over a Unix socket skips the test (fails it
// under CI=true): pgpool is given the servers' TCP addresses.
func New(tb testing.TB, primary *server.Server, standbys []*server.Server, cfg *Config) *Pgpool {
	tb.Helper()
	servers := append([]*server.Server{primary}, standbys...)
	if err := checkServers(servers); err != nil {
		tb.Fatal(err)
		return nil
	}
	var opts Config
	if cfg != nil {
		opts = *cfg
	}
	if _, err := opts.config(); err != nil {
		tb.Fatal(err)
	}
	bin := pgpool2.Need(tb)
	for _, s := range servers {
		proc.NeedTCP(tb, s.Addr(), "pgpool.New")
	}
	return proc.Started(tb, proc.StartAttempts*(pgpoolReadyTimeout+pgpoolStopTimeout+proc.KillGrace), func(ctx context.Context) (*Pgpool, error) {
		return startPgpool(ctx, bin, servers, opts)
	})
}

// DSN returns a URL connection string for the named database through pgpool: the
// primary's DSN for that database (its user and query options included) with
// pgpool's address. An empty name means the server's default database.
func (p *Pgpool) DSN(database string) string {
	dsn, err := server.DSNWithAddr(p.primary.DSN(database), p.Addr())
	if err != nil {
		return "" // not reached: the server's DSN is a postgres:// URL, Addr a host:port
	}
	return dsn
}

// Addr returns pgpool's address, 127.0.0.1:port.
func (p *Pgpool) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)) }

// LogPath returns the path of pgpool's log file, its standard error, where
// log_per_node_statement records each statement with the node it went to
// ("DB node id: 1 backend pid: ... statement: ..."). The file is removed by Stop.
func (p *Pgpool) LogPath() string { return filepath.Join(p.dir, "pgpool.log") }

// Nodes returns the backends as SHOW POOL_NODES reports them, asked over a new
// connection through pgpool (which, as for any client, opens connections to the
// nodes it holds up). The wait is bounded by ctx and by a minute.
func (p *Pgpool) Nodes(ctx context.Context) ([]Node, error) {
	fields, rows, err := p.show(ctx, "SHOW POOL_NODES", pgpoolShowTimeout)
	if err != nil {
		return nil, fmt.Errorf("pgtxtest: pgpool SHOW POOL_NODES: %w", err)
	}
	return parseNodes(fields, rows)
}

// Processes returns pgpool's children, one each, as SHOW POOL_PROCESSES reports
// them, asked over a new connection through pgpool (so at least one child is busy
// answering). The wait is bounded by ctx and by a minute.
func (p *Pgpool) Processes(ctx context.Context) ([]Process, error) {
	fields, rows, err := p.show(ctx, "SHOW POOL_PROCESSES", pgpoolShowTimeout)
	if err != nil {
		return nil, fmt.Errorf("pgtxtest: pgpool SHOW POOL_PROCESSES: %w", err)
	}
	return parseProcesses(fields, rows)
}

// PromoteNode makes node id the primary in pgpool's view with pcp_promote_node -n
// id, and returns once SHOW POOL_NODES shows it so; pgpool marks every other node
// down. It does not promote the server: a test does that itself with
// [server.Server.Promote], and stops the old primary. A node pgpool made the
// primary already is no error: with its defaults, pgpool marks a primary that
// shuts down as down and looks for the new primary itself. pgpool refuses to
// promote a node that is down. The wait is bounded by ctx and by 30 seconds.
func (p *Pgpool) PromoteNode(ctx context.Context, id int) error {
	return p.pcp(ctx, "pcp_promote_node", id, func(n Node) bool { return n.Role == "primary" })
}

// AttachNode attaches node id again with pcp_attach_node -n id, for example a
// standby pgpool marked down while its server was down, and returns once SHOW
// POOL_NODES shows it up. pgpool restarts its children to do it. The wait is
// bounded by ctx and by 30 seconds.
func (p *Pgpool) AttachNode(ctx context.Context, id int) error {
	return p.pcp(ctx, "pcp_attach_node", id, func(n Node) bool { return n.Status == "up" })
}

// Restart stops pgpool (a fast shutdown, which closes every client) and starts it
// again on the same ports, discarding its record of the nodes' status (-D), so that
// every node is attached again, and returns once it is ready, as New does: every
// server must be running. It returns an error for a stopped pgpool and if another
// process took the port meanwhile. If ctx ends first pgpool may be left down; Stop
// still cleans it up.
func (p *Pgpool) Restart(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return errors.New("pgtxtest: pgpool Restart: pgpool is stopped")
	}
	if err := p.stopProcess(); err != nil {
		return fmt.Errorf("pgtxtest: restart pgpool at %s: %w", p.Addr(), err)
	}
	if err := p.start(ctx); err != nil {
		return fmt.Errorf("pgtxtest: restart pgpool at %s: %w", p.Addr(), err)
	}
	return nil
}

// Stop stops pgpool at once, closing every client and backend connection, and
// removes its directory. It is idempotent: later calls return the result of the
// first. It sends SIGINT, pgpool's fast shutdown (SIGTERM, its smart one, would wait
// for every client to leave), and kills pgpool and its children if it has not
// exited within ten seconds.
func (p *Pgpool) Stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return p.stopErr
	}
	p.stopped = true
	p.stopErr = errors.Join(p.stopProcess(), os.RemoveAll(p.dir))
	if p.stopErr != nil {
		p.stopErr = fmt.Errorf("pgtxtest: stop pgpool at %s: %w", p.Addr(), p.stopErr)
	}
	return p.stopErr
}
