package pgpool

import (
	"fmt"
	"net"
	"slices"
	"strconv"
)

// showRows returns the rows of a SHOW result as column name to value, checking
// that the columns want are there.
func showRows(fields []string, rows [][][]byte, want ...string) ([]map[string]string, error) {
	for _, name := range want {
		if !slices.Contains(fields, name) {
			return nil, fmt.Errorf("pgtxtest: pgpool: no column %s in %v", name, fields)
		}
	}
	out := make([]map[string]string, 0, len(rows))
	for _, r := range rows {
		if len(r) != len(fields) {
			return nil, fmt.Errorf("pgtxtest: pgpool: a row of %d values for %d columns", len(r), len(fields))
		}
		row := make(map[string]string, len(r))
		for i, name := range fields {
			row[name] = string(r[i])
		}
		out = append(out, row)
	}
	return out, nil
}

// parseNodes reads the result of SHOW POOL_NODES.
func parseNodes(fields []string, rows [][][]byte) ([]Node, error) {
	m, err := showRows(fields, rows, "node_id", "hostname", "port", "status", "role", "load_balance_node", "select_cnt")
	if err != nil {
		return nil, err
	}
	nodes := make([]Node, 0, len(m))
	for _, row := range m {
		id, errID := strconv.Atoi(row["node_id"])
		selects, errSel := strconv.ParseInt(row["select_cnt"], 10, 64)
		if errID != nil || errSel != nil {
			return nil, fmt.Errorf("pgtxtest: pgpool: SHOW POOL_NODES row %v: bad node_id or select_cnt", row)
		}
		nodes = append(nodes, Node{
			ID:              id,
			Addr:            net.JoinHostPort(row["hostname"], row["port"]),
			Status:          row["status"],
			Role:            row["role"],
			LoadBalanceNode: row["load_balance_node"] == "true",
			SelectCount:     selects,
		})
	}
	return nodes, nil
}

// parseProcesses reads the result of SHOW POOL_PROCESSES: a child once, with the
// status of its first row and the first database and user any of its rows name.
func parseProcesses(fields []string, rows [][][]byte) ([]Process, error) {
	m, err := showRows(fields, rows, "pool_pid", "database", "username", "status")
	if err != nil {
		return nil, err
	}
	var procs []Process
	for _, row := range m {
		pid, err := strconv.Atoi(row["pool_pid"])
		if err != nil {
			return nil, fmt.Errorf("pgtxtest: pgpool: SHOW POOL_PROCESSES row %v: bad pool_pid", row)
		}
		i := slices.IndexFunc(procs, func(p Process) bool { return p.PID == pid })
		if i < 0 {
			procs = append(procs, Process{PID: pid, Status: row["status"]})
			i = len(procs) - 1
		}
		if procs[i].Database == "" && procs[i].User == "" {
			procs[i].Database, procs[i].User = row["database"], row["username"]
		}
	}
	return procs, nil
}
