package formation

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Bounds of the questions asked of the monitor.
const (
	monitorQueryTimeout = 5 * time.Second        // one connection and query
	formationPoll       = 100 * time.Millisecond // between two looks at the nodes' states
)

// Nodes returns the formation's data nodes as the monitor sees them now (table
// pgautofailover.node), in the order they joined: node1, node2.
func (f *Formation) Nodes(ctx context.Context) ([]Node, error) {
	var nodes []Node
	err := f.queryMonitor(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, `
			SELECT nodeid, nodename, nodeport, reportedstate::text, goalstate::text, health = 1,
				coalesce(reportedpgisrunning, false), reportedtli, reportedlsn::text, reporttime
			FROM pgautofailover.node WHERE formationid = $1 ORDER BY nodeid`, formationName)
		if err != nil {
			return err
		}
		nodes, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Node, error) {
			var n Node
			err := row.Scan(&n.ID, &n.Name, &n.Port, &n.State, &n.Goal, &n.Healthy,
				&n.Running, &n.Timeline, &n.LSN, &n.ReportTime)
			return n, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgtxtest: formation nodes: %w", err)
	}
	for i := range nodes {
		if m := f.member(nodes[i].Name); m != nil {
			nodes[i].DSN = f.nodeDSN(m)
			nodes[i].PID = m.postmasterPID()
		}
	}
	return nodes, nil
}

// Primary returns the node that is the primary now: the one whose reported and
// assigned states are both primary, or both wait_primary (a primary without a
// secondary to replicate to, whose writes wait for none). It returns an error when
// no node is, for example while a failover runs: [Formation.WaitState] waits for
// one.
func (f *Formation) Primary(ctx context.Context) (Node, error) {
	nodes, err := f.Nodes(ctx)
	if err != nil {
		return Node{}, err
	}
	if p, ok := primaryOf(nodes); ok {
		return p, nil
	}
	return Node{}, fmt.Errorf("pgtxtest: the formation has no primary now (%s)", describeNodes(nodes))
}

// primaryOf returns the one node of nodes that is the primary, if there is one.
func primaryOf(nodes []Node) (Node, bool) {
	var found []Node
	for _, n := range nodes {
		if n.State == n.Goal && (n.State == "primary" || n.State == "wait_primary") {
			found = append(found, n)
		}
	}
	if len(found) != 1 {
		return Node{}, false
	}
	return found[0], true
}

// WaitState waits until every node named in want has reached the state it maps to,
// reported by its keeper and assigned by the monitor, such as {"node1": "secondary",
// "node2": "primary"}; nodes not named may be in any state. It returns the nodes as
// they were then. It looks every 100 milliseconds and waits at most a minute, less
// if ctx ends first; the error then says where each node was.
func (f *Formation) WaitState(ctx context.Context, want map[string]string) ([]Node, error) {
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if m := f.member(name); m == nil || m == f.monitor {
			return nil, fmt.Errorf("pgtxtest: WaitState: the formation has no node %q (it has node1 and node2)", name)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, formationWaitTimeout)
	defer cancel()
	tick := time.NewTicker(formationPoll)
	defer tick.Stop()
	var nodes []Node
	var err error
	for {
		nodes, err = f.Nodes(ctx)
		if err == nil && reached(nodes, want) {
			return nodes, nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = errors.New(describeNodes(nodes))
			}
			return nil, fmt.Errorf("pgtxtest: formation: waiting for %s: %w (last seen: %w)", describeWant(want), ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// reached tells whether each node named in want has reported and been assigned the
// state want maps it to.
func reached(nodes []Node, want map[string]string) bool {
	seen := 0
	for _, n := range nodes {
		if state, ok := want[n.Name]; ok {
			if n.State != state || n.Goal != state {
				return false
			}
			seen++
		}
	}
	return seen == len(want)
}

// describeNodes says where each node is, for errors: "node1 primary, node2
// catchingup (goal secondary)".
func describeNodes(nodes []Node) string {
	if len(nodes) == 0 {
		return "no nodes"
	}
	parts := make([]string, len(nodes))
	for i, n := range nodes {
		parts[i] = n.Name + " " + n.State
		if n.Goal != n.State {
			parts[i] += " (goal " + n.Goal + ")"
		}
	}
	return strings.Join(parts, ", ")
}

func describeWant(want map[string]string) string {
	parts := make([]string, 0, len(want))
	for _, name := range slices.Sorted(maps.Keys(want)) {
		parts = append(parts, name+" "+want[name])
	}
	return strings.Join(parts, ", ")
}

// Events returns the monitor's event log for the formation (table
// pgautofailover.event), oldest first: every state a keeper reported, every goal
// the monitor assigned and every change of a node's health, with the monitor's
// time. The events after a fault show how long the formation itself took to
// react and to settle.
func (f *Formation) Events(ctx context.Context) ([]Event, error) {
	var events []Event
	err := f.queryMonitor(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, `
			SELECT eventid, eventtime, nodename, reportedstate::text, goalstate::text, coalesce(description, '')
			FROM pgautofailover.event WHERE formationid = $1 ORDER BY eventid`, formationName)
		if err != nil {
			return err
		}
		events, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Event, error) {
			var e Event
			err := row.Scan(&e.ID, &e.Time, &e.Node, &e.State, &e.Goal, &e.Description)
			return e, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgtxtest: formation events: %w", err)
	}
	return events, nil
}

// Failover performs a planned switchover, as pg_autoctl perform failover does (the
// monitor's pgautofailover.perform_failover): the primary drains and is demoted,
// the secondary is promoted on a new timeline, and the old primary follows it. It
// returns once the two nodes have swapped roles, the old primary secondary and the
// old secondary primary, within a few seconds. It returns an error at once unless
// one node is primary and the other secondary, and waits at most a minute, less if
// ctx ends first.
func (f *Formation) Failover(ctx context.Context) error {
	nodes, err := f.Nodes(ctx)
	if err != nil {
		return err
	}
	primary, secondary, ok := pairOf(nodes)
	if !ok {
		return fmt.Errorf("pgtxtest: Failover needs a primary and a secondary, and the formation has %s", describeNodes(nodes))
	}
	err = f.queryMonitor(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "SELECT pgautofailover.perform_failover($1, 0)", formationName)
		return err
	})
	if err != nil {
		return fmt.Errorf("pgtxtest: Failover: %w", err)
	}
	if _, err := f.WaitState(ctx, map[string]string{primary.Name: "secondary", secondary.Name: "primary"}); err != nil {
		return fmt.Errorf("pgtxtest: Failover from %s to %s: %w", primary.Name, secondary.Name, err)
	}
	return nil
}

// pairOf returns the primary and the secondary of nodes when they are exactly
// that: one node primary and one secondary, each in its assigned state.
func pairOf(nodes []Node) (primary, secondary Node, ok bool) {
	if len(nodes) != 2 {
		return primary, secondary, false
	}
	for _, n := range nodes {
		switch {
		case n.State != n.Goal:
			return primary, secondary, false
		case n.State == "primary":
			primary = n
		case n.State == "secondary":
			secondary = n
		}
	}
	return primary, secondary, primary.Name != "" && secondary.Name != ""
}

// KillPrimary kills the primary's postmaster with SIGKILL, as a crash would, and
// returns the primary as it was, with the pid it killed. It returns at once; what
// follows is pg_auto_failover's doing, and both outcomes occur. The node's
// pg_autoctl starts PostgreSQL again in place within a second (crash recovery, the
// same timeline). But if its keeper reports PostgreSQL not running to the monitor
// first, the monitor counts the primary as failed at once (pg_auto_failover 2.0's
// IsUnhealthy, src/monitor/node_metadata.c) and promotes the secondary, and the
// restarted node is demoted and rejoins as a secondary. A client may write to it in
// between; synchronous replication puts a write it acknowledges on the secondary
// too.
// [Formation.Nodes] shows the new postmaster's pid, [Formation.Events] what the
// monitor decided.
func (f *Formation) KillPrimary(ctx context.Context) (Node, error) {
	p, err := f.Primary(ctx)
	if err != nil {
		return Node{}, err
	}
	m := f.member(p.Name)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.signalPostmaster(m, p.PID, syscall.SIGKILL); err != nil {
		return Node{}, fmt.Errorf("pgtxtest: KillPrimary %s: %w", p.Name, err)
	}
	return p, nil
}

// RestartPrimary stops the primary's PostgreSQL with a fast shutdown (SIGINT to its
// postmaster: sessions end with 57P01, and new connections get FATAL 57P03 "the
// database system is shutting down") and returns the primary as it was. It returns
// at once; the node's pg_autoctl then starts PostgreSQL again in place (new
// connections get 57P03 "the database system is starting up" until it accepts them),
// or, as after KillPrimary, the monitor fails over first.
func (f *Formation) RestartPrimary(ctx context.Context) (Node, error) {
	p, err := f.Primary(ctx)
	if err != nil {
		return Node{}, err
	}
	m := f.member(p.Name)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.signalPostmaster(m, p.PID, syscall.SIGINT); err != nil {
		return Node{}, fmt.Errorf("pgtxtest: RestartPrimary %s: %w", p.Name, err)
	}
	return p, nil
}

// signalPostmaster sends sig to the member's postmaster pid after checking that it
// is one of the member's processes: a member of the process group of its pg_autoctl
// run, so that a stale postmaster.pid never points the signal at a stranger.
func (f *Formation) signalPostmaster(m *formationMember, pid int, sig syscall.Signal) error {
	switch {
	case f.stopped:
		return errors.New("the formation is stopped")
	case m.proc == nil:
		return errors.New("the node is stopped")
	case pid == 0:
		return errors.New("no postmaster.pid: its PostgreSQL is not running")
	}
	pgid, err := syscall.Getpgid(pid)
	if err != nil {
		return fmt.Errorf("postmaster pid %d: %w", pid, err)
	}
	if pgid != m.proc.Cmd.Process.Pid {
		return fmt.Errorf("postmaster.pid names pid %d, which is not one of the node's processes (group %d, want %d)",
			pid, pgid, m.proc.Cmd.Process.Pid)
	}
	return syscall.Kill(pid, sig)
}

// StopPrimary stops the primary node entirely, its pg_autoctl run and with it its
// PostgreSQL (a fast shutdown), and returns the primary as it was. The monitor then
// counts the node as failed and promotes the secondary, which becomes wait_primary
// (a primary with no secondary to replicate to) five or six seconds later:
// WaitState(ctx, map[string]string{other: "wait_primary"}) waits for that.
// [Formation.StartNode] starts the stopped node again. StopPrimary waits at most 30
// seconds for the node to stop, then kills it.
func (f *Formation) StopPrimary(ctx context.Context) (Node, error) {
	p, err := f.Primary(ctx)
	if err != nil {
		return Node{}, err
	}
	m := f.member(p.Name)
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.stopped:
		return Node{}, errors.New("pgtxtest: StopPrimary: the formation is stopped")
	case m.proc == nil:
		return Node{}, fmt.Errorf("pgtxtest: StopPrimary: %s is stopped already", p.Name)
	}
	if err := stopMembers(m); err != nil {
		return Node{}, fmt.Errorf("pgtxtest: StopPrimary: %w", err)
	}
	return p, nil
}

// StartNode starts a node that [Formation.StopPrimary] stopped: its pg_autoctl run
// again, with the same data directory and port. It returns once the node's keeper
// has reported to the monitor; the monitor then has it rejoin as a secondary (after
// pg_rewind, or a new pg_basebackup), and the primary, wait_primary meanwhile,
// becomes primary again once it has caught up: WaitState waits for that. StartNode
// waits at most a minute, less if ctx ends first.
func (f *Formation) StartNode(ctx context.Context, name string) error {
	m := f.member(name)
	if m == nil || m == f.monitor {
		return fmt.Errorf("pgtxtest: StartNode: the formation has no node %q (it has node1 and node2)", name)
	}
	since := time.Now()
	return f.startMember(ctx, m, func(ctx context.Context) error { return f.reportedSince(ctx, m, since) })
}

// reportedSince returns nil if the monitor has had a report from m's keeper sent
// after since.
func (f *Formation) reportedSince(ctx context.Context, m *formationMember, since time.Time) error {
	nodes, err := f.Nodes(ctx)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if n.Name == m.name && n.ReportTime.After(since) {
			return nil
		}
	}
	return fmt.Errorf("no report from %s's keeper since %s", m.name, since.Format(time.TimeOnly))
}

// queryMonitor runs fn on a new connection to the monitor, bounded by
// monitorQueryTimeout.
func (f *Formation) queryMonitor(ctx context.Context, fn func(context.Context, *pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(ctx, monitorQueryTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, f.MonitorDSN())
	if err != nil {
		return fmt.Errorf("connect to the monitor: %w", err)
	}
	defer func() {
		closeCtx, closeCancel := context.WithTimeout(context.WithoutCancel(ctx), monitorQueryTimeout)
		defer closeCancel()
		_ = conn.Close(closeCtx)
	}()
	return fn(ctx, conn)
}
