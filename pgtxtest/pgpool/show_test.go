package pgpool

import (
	"reflect"
	"testing"
)

// rows makes a SHOW result's rows from strings.
func rows(values ...[]string) [][][]byte {
	out := make([][][]byte, len(values))
	for i, row := range values {
		for _, v := range row {
			out[i] = append(out[i], []byte(v))
		}
	}
	return out
}

func TestParseNodes(t *testing.T) {
	t.Parallel()
	fields := []string{"node_id", "hostname", "port", "status", "pg_status", "lb_weight", "role", "pg_role",
		"select_cnt", "load_balance_node", "replication_delay", "replication_state", "replication_sync_state", "last_status_change"}
	got, err := parseNodes(fields, rows(
		[]string{"0", "127.0.0.1", "5432", "up", "unknown", "0.500000", "primary", "unknown", "3", "false", "0", "", "", "2026-12-06 18:03:03"},
		[]string{"1", "127.0.0.1", "5433", "waiting", "unknown", "0.500000", "standby", "unknown", "0", "true", "0", "", "", "2026-12-06 18:03:03"},
	))
	want := []Node{
		{ID: 0, Addr: "127.0.0.1:5432", Status: "up", Role: "primary", SelectCount: 3},
		{ID: 1, Addr: "127.0.0.1:5433", Status: "waiting", Role: "standby", LoadBalanceNode: true},
	}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("parseNodes = %+v, %v; want %+v", got, err, want)
	}
	if _, err := parseNodes(fields[1:], nil); err == nil {
		t.Error("parseNodes without node_id succeeded")
	}
	if _, err := parseNodes(fields, rows([]string{"x", "h", "1", "up", "", "", "primary", "", "0", "false", "", "", "", ""})); err == nil {
		t.Error("parseNodes of a bad node_id succeeded")
	}
}

// TestParseProcesses: a child with several pools (rows) is one Process, with
// its first row's status and the first connection any row names.
func TestParseProcesses(t *testing.T) {
	t.Parallel()
	fields := []string{"pool_pid", "start_time", "client_connection_count", "database", "username",
		"backend_connection_time", "pool_counter", "status"}
	got, err := parseProcesses(fields, rows(
		[]string{"101", "t", "0", "", "", "", "", "Wait for connection"},
		[]string{"102", "t", "1", "", "", "", "", "Idle"},
		[]string{"102", "t", "1", "app", "alice", "t", "1", "Idle"},
		[]string{"102", "t", "1", "other", "bob", "t", "1", "Idle"},
	))
	want := []Process{
		{PID: 101, Status: "Wait for connection"},
		{PID: 102, Status: "Idle", Database: "app", User: "alice"},
	}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("parseProcesses = %+v, %v; want %+v", got, err, want)
	}
	if _, err := parseProcesses(fields, rows([]string{"1", "t"})); err == nil {
		t.Error("parseProcesses of a short row succeeded")
	}
}
