package server

import (
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestSelectEnvDSN(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, dsn string
		wantURL   string
		wantErr   bool
	}{
		{name: "URL kept", dsn: "postgres://u:p@h:5433/db?sslmode=disable", wantURL: "postgres://u:p@h:5433/db?sslmode=disable"},
		{name: "postgresql scheme", dsn: "postgresql://u@h/db", wantURL: "postgresql://u@h/db"},
		{
			name: "keyword=value", dsn: "host=db.example port=5433 user=app password='p w\\'x' dbname=shop sslmode=disable",
			wantURL: "postgres://app:p%20w%27x@db.example:5433/shop?sslmode=disable",
		},
		{name: "spaces around =", dsn: " host = h  dbname = d ", wantURL: "postgres://h/d"},
		{name: "unix socket", dsn: "host=/var/run/postgresql dbname=x", wantURL: "postgres:///x?host=%2Fvar%2Frun%2Fpostgresql"},
		{name: "several hosts", dsn: "host=a,b port=1,2 user=u sslmode=disable", wantURL: "postgres://u@a:1,b:2?sslmode=disable"},
		{name: "bad URL", dsn: "postgres://u@h:notaport/db", wantErr: true},
		{name: "no =", dsn: "host", wantErr: true},
		{name: "unterminated quote", dsn: "password='abc", wantErr: true},
		{name: "empty keyword", dsn: "=x", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u, err := envURL(tc.dsn)
			if tc.wantErr {
				if err == nil {
					t.Errorf("envURL(%q) = %v, want an error", tc.dsn, u)
				}
				return
			}
			if err != nil {
				t.Fatalf("envURL(%q): %v", tc.dsn, err)
			}
			if u.String() != tc.wantURL {
				t.Errorf("envURL(%q) = %q, want %q", tc.dsn, u.String(), tc.wantURL)
			}
			// pgx must read the URL as it reads the original.
			want, err := pgconn.ParseConfig(tc.dsn)
			if err != nil {
				t.Fatalf("pgconn.ParseConfig(%q): %v", tc.dsn, err)
			}
			got, err := pgconn.ParseConfig(u.String())
			if err != nil {
				t.Fatalf("pgconn.ParseConfig(%q): %v", u, err)
			}
			if got.Host != want.Host || got.Port != want.Port || got.User != want.User || got.Password != want.Password ||
				got.Database != want.Database || len(got.Fallbacks) != len(want.Fallbacks) {
				t.Errorf("URL %q connects as %s@%s:%d/%s (%d fallbacks), the DSN as %s@%s:%d/%s (%d)", u,
					got.User, got.Host, got.Port, got.Database, len(got.Fallbacks),
					want.User, want.Host, want.Port, want.Database, len(want.Fallbacks))
			}
		})
	}
}
