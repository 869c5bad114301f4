package formation

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pgtx-go/pgtx/pgtxtest/internal/proc"
)

// Bounds of a formation's steps.
const (
	formationStartTimeout = 3 * time.Minute  // New, every attempt included
	formationWaitTimeout  = time.Minute      // WaitState, Failover, StartNode
	autoctlCommandTimeout = 2 * time.Minute  // one pg_autoctl create (initdb, pg_basebackup)
	autoctlStopTimeout    = 30 * time.Second // after SIGTERM to pg_autoctl run, before SIGKILL to its group
	formationDirPrefix    = "pgtx-pgtest-formation-"
	formationName         = "default" // pg_autoctl's formation, group 0
	monitorName           = "monitor"
)

// Config configures a formation that [New] starts. Zero fields
// mean the defaults in brackets.
type Config struct {
	// Database is the application database that pg_autoctl creates on the primary and
	// that [Formation.URI] names ["app"].
	Database string
	// Settings are extra server settings of the two data nodes, written after the
	// kit's own and so overriding them, e.g. {"max_connections": "300"}. The kit's
	// own: shared_buffers = 128MB (pg_autoctl would size it from the machine's
	// memory), fsync = off, dynamic_shared_memory_type = mmap, and
	// wal_retrieve_retry_interval = 500ms so that a standby reconnects within a
	// second of its primary's restart. pg_auto_failover manages synchronous_commit,
	// synchronous_standby_names and what replication needs itself.
	Settings map[string]string
	// MonitorSettings are extra settings of the monitor, written after the kit's
	// own. The kit's own make failures count within seconds rather than tens of
	// seconds: pgautofailover.health_check_period = 1000 (milliseconds),
	// health_check_timeout = 1000, health_check_max_retries = 1,
	// health_check_retry_delay = 500, node_considered_unhealthy_timeout = 2000,
	// primary_demote_timeout = 3000 and startup_grace_period = 1000. Each node's
	// keeper is given a timeout.network_partition_timeout of 2 seconds, below
	// primary_demote_timeout as with pg_auto_failover's defaults (20 and 30
	// seconds): a primary cut off from the monitor and from its standby stops its
	// PostgreSQL before the monitor may promote the standby.
	MonitorSettings map[string]string
}

// Formation is a pg_auto_failover formation started by [New]: a monitor
// and two data nodes, node1 (the first primary) and node2 (its secondary), each a
// PostgreSQL cluster managed by its own pg_autoctl run process, on free ports of
// 127.0.0.1. Each keeper restarts its PostgreSQL when it dies; the monitor promotes
// the secondary when the primary stays unreachable, and performs planned
// switchovers ([Formation.Failover]). Replication is synchronous, as pg_auto_failover
// sets it up for a primary with one secondary: a COMMIT the primary acknowledged is
// on the secondary too.
//
// Its methods are safe for concurrent use.
type Formation struct {
	bin      string // pg_autoctl
	bindir   string // the PostgreSQL binaries it runs
	root     string
	database string
	cred     *syscall.Credential // nil when not root
	monitor  *formationMember
	nodes    []*formationMember // node1, node2

	mu      sync.Mutex // guards the members' processes, stopped and stopErr
	stopped bool
	stopErr error
}

// Node is a data node of a [Formation] as the monitor last saw it.
type Node struct {
	ID   int64  // the monitor's node id
	Name string // "node1" or "node2"
	Port int    // its PostgreSQL's port on 127.0.0.1
	// DSN is a URL connection string for the application database on this node
	// alone, as the proc.Superuser postgres.
	DSN string
	// State is the state the node's keeper last reported ("primary", "secondary",
	// "wait_primary", "catchingup", "demoted" ...), and Goal the state the monitor
	// assigned it. They are equal when the node has reached its goal.
	State, Goal string
	Healthy     bool      // the monitor's last health check reached its PostgreSQL
	Running     bool      // its keeper last reported PostgreSQL running
	Timeline    int       // the timeline its keeper last reported
	LSN         string    // the WAL position its keeper last reported
	ReportTime  time.Time // when its keeper last reported
	// PID is the process id in its postmaster.pid when the node was read, 0 if there
	// is none. A postmaster killed with SIGKILL leaves its pid there until the next
	// one starts.
	PID int
}

// Event is one line of the monitor's event log (table pgautofailover.event):
// a state reported by a node's keeper, a goal state the monitor assigned, or a
// change of health.
type Event struct {
	ID          int64
	Time        time.Time // the monitor's clock, the machine's own
	Node        string
	State       string // the node's reported state when the event was logged
	Goal        string // the node's assigned state when the event was logged
	Description string
}

// New starts a pg_auto_failover formation configured by cfg (nil: the defaults)
// and stops it in tb.Cleanup,
// removing its directory; if the test failed by then, the tail of every member's
// logs is logged first. It runs pg_autoctl create monitor, then pg_autoctl create
// postgres for node1 and node2 (trust authentication, no SSL, hostnames and
// listen_addresses 127.0.0.1, as the postgres system user when running as root), each
// followed by a pg_autoctl run process that the kit owns, and returns once node1 is
// primary and node2 secondary, about six seconds later on an idle machine.
//
// pg_autoctl is looked for in PGTX_TEST_PG_AUTOCTL, then PATH, then
// /usr/bin/pg_autoctl; the PostgreSQL binaries in PGTX_TEST_PG_BINDIR, else those of
// local clusters (see the package documentation), else the highest
// /usr/lib/postgresql/*/bin, and their server must have the pgautofailover extension.
// When either is missing the test is skipped with how to install them, except under
// CI=true where that is a failure. An invalid Config and a formation that does not
// start fail tb.
func New(tb testing.TB, cfg *Config) *Formation {
	tb.Helper()
	var opts Config
	if cfg != nil {
		opts = *cfg
	}
	if err := opts.validate(); err != nil {
		tb.Fatal(err)
	}
	bin, bindir, err := findFormationTools(os.Getenv)
	if err != nil {
		if fail, msg := missingFormation(os.Getenv, err); fail {
			tb.Fatal(msg)
		} else {
			tb.Skip(msg)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), formationStartTimeout)
	defer cancel()
	start := time.Now()
	f, err := startFormation(ctx, bin, bindir, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		tb.Helper() // the logs and a failure to stop are reported at the line of the call
		if tb.Failed() {
			tb.Log(f.logTails())
		}
		if err := f.Stop(); err != nil {
			tb.Errorf("%v", err)
		}
	})
	tb.Logf("pgtxtest: formation ready in %v: monitor on port %d, primary node1 on %d, secondary node2 on %d",
		time.Since(start).Round(time.Millisecond), f.monitor.port, f.nodes[0].port, f.nodes[1].port)
	return f
}

// URI returns the formation's connection string for the application database: a
// multi-host postgres:// URL of both nodes with target_session_attrs=read-write, so
// that a client connects to whichever node is the primary now, as the proc.Superuser
// postgres, without SSL. It is what pg_autoctl show uri prints, with the user and
// sslmode=disable.
func (f *Formation) URI() string {
	hosts := make([]string, len(f.nodes))
	for i, m := range f.nodes {
		hosts[i] = m.addr()
	}
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(proc.Superuser),
		Host:     strings.Join(hosts, ","),
		Path:     "/" + f.database,
		RawQuery: "sslmode=disable&target_session_attrs=read-write",
	}
	return u.String()
}

// MonitorDSN returns the connection string of the monitor's database,
// pg_auto_failover, as pg_autoctl's role autoctl_node, which may read the
// pgautofailover schema's tables and call its functions.
func (f *Formation) MonitorDSN() string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User("autoctl_node"),
		Host:     f.monitor.addr(),
		Path:     "/pg_auto_failover",
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// LogPath returns the path of the output of pg_autoctl for the named member,
// "monitor", "node1" or "node2": its create and run commands, with its keeper's
// state changes. The member's PostgreSQL logs to the log directory of its data
// directory. Both are removed when the formation stops. An unknown name gives "".
func (f *Formation) LogPath(name string) string {
	m := f.member(name)
	if m == nil {
		return ""
	}
	return m.logPath()
}

// Stop stops every member, the data nodes first, and removes the formation's
// directory. Each pg_autoctl run is sent SIGTERM, which stops its PostgreSQL with a
// fast shutdown; a process group still there after 30 seconds is killed. Stop is
// idempotent: later calls return the result of the first.
func (f *Formation) Stop() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return f.stopErr
	}
	f.stopped = true
	errs := []error{stopMembers(f.nodes...), stopMembers(f.monitor), os.RemoveAll(f.root)}
	if err := errors.Join(errs...); err != nil {
		f.stopErr = fmt.Errorf("pgtxtest: stop formation in %s: %w", f.root, err)
	}
	return f.stopErr
}

// member returns the member with name, or nil.
func (f *Formation) member(name string) *formationMember {
	if name == monitorName {
		return f.monitor
	}
	for _, m := range f.nodes {
		if m.name == name {
			return m
		}
	}
	return nil
}

// logTails returns the last lines of every member's pg_autoctl output and server
// log, for a test that failed.
func (f *Formation) logTails() string {
	var b strings.Builder
	b.WriteString("pgtxtest: formation logs (tails):")
	for _, m := range append([]*formationMember{f.monitor}, f.nodes...) {
		fmt.Fprintf(&b, "\n--- %s: pg_autoctl (%s)\n%s", m.name, m.logPath(), proc.Tail(m.logPath(), 0, 3000))
		if p := m.serverLogPath(); p != "" {
			fmt.Fprintf(&b, "\n--- %s: postgres (%s)\n%s", m.name, p, proc.Tail(p, 0, 1500))
		}
	}
	return b.String()
}

// formationMember is the monitor or a data node: a data directory root/name, the
// output of its pg_autoctl commands in root/name.log, and the pg_autoctl run process
// while it runs.
type formationMember struct {
	name string
	root string
	port int
	proc *proc.Process // nil while stopped; guarded by Formation.mu
}

func (m *formationMember) dataDir() string { return filepath.Join(m.root, m.name) }
func (m *formationMember) logPath() string { return filepath.Join(m.root, m.name+".log") }
func (m *formationMember) pgidPath() string {
	return filepath.Join(m.root, m.name+".pgid")
}
func (m *formationMember) addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(m.port))
}

// serverLogPath returns the newest file of the member's server log directory, or "".
func (m *formationMember) serverLogPath() string {
	files, _ := filepath.Glob(filepath.Join(m.dataDir(), "log", "*.log"))
	newest, newestTime := "", time.Time{}
	for _, p := range files {
		if st, err := os.Stat(p); err == nil && st.ModTime().After(newestTime) {
			newest, newestTime = p, st.ModTime()
		}
	}
	return newest
}

// postmasterPID returns the process id in the member's postmaster.pid, 0 if there is
// none.
func (m *formationMember) postmasterPID() int {
	b, err := os.ReadFile(filepath.Join(m.dataDir(), "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// nodeDSN returns the connection string of the application database on node m.
func (f *Formation) nodeDSN(m *formationMember) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(proc.Superuser),
		Host:     m.addr(),
		Path:     "/" + f.database,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}
