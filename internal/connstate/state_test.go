package connstate

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestSetMode(t *testing.T) {
	tests := []struct {
		mode  pgx.QueryExecMode
		named bool
	}{
		{pgx.QueryExecModeCacheStatement, true},
		{pgx.QueryExecModeCacheDescribe, false},
		{pgx.QueryExecModeDescribeExec, false},
		{pgx.QueryExecModeExec, false},
		{pgx.QueryExecModeSimpleProtocol, false},
	}
	for _, tt := range tests {
		var s State
		s.SetMode(tt.mode)
		if s.Named != tt.named {
			t.Errorf("%v: named %v, want %v", tt.mode, s.Named, tt.named)
		}
	}
}

// TestForget: a prepared statement that no longer exists (26000) forgets
// the prepared id reads; any other error forgets nothing.
func TestForget(t *testing.T) {
	tests := []struct {
		name string
		err  error
		kept bool
	}{
		{"26000: invalid_sql_statement_name", &pgconn.PgError{Code: "26000"}, false},
		{"0A000: cached plan must not change result type", &pgconn.PgError{Code: "0A000"}, true},
		{"a network error", errors.New("eof"), true},
		{"no error", nil, true},
	}
	for _, tt := range tests {
		s := State{XidPrepared: true}
		s.Forget(tt.err)
		if s.XidPrepared != tt.kept {
			t.Errorf("%s: xidPrepared %v, want %v", tt.name, s.XidPrepared, tt.kept)
		}
	}
}
