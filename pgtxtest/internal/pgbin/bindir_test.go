package pgbin

import (
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/pgtx-go/pgtx/pgtxtest/internal/kittest"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/proc"
)

func TestSelectFindsLocalBinaries(t *testing.T) {
	t.Parallel()
	glob := []string{"/usr/lib/postgresql/9.6/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/10/bin"}
	tests := []struct {
		name    string
		env     map[string]string
		pgCfg   string
		glob    []string
		path    string
		servers []string // directories that hold initdb and postgres
		want    string
		wantErr bool
	}{
		{
			name: "PGTX_TEST_PG_BINDIR first", env: map[string]string{"PGTX_TEST_PG_BINDIR": "/opt/pg/bin"},
			pgCfg: "/usr/lib/postgresql/16/bin", servers: []string{"/opt/pg/bin", "/usr/lib/postgresql/16/bin"}, want: "/opt/pg/bin",
		},
		{
			name: "PGTX_TEST_PG_BINDIR without a server is an error", env: map[string]string{"PGTX_TEST_PG_BINDIR": "/nope"},
			pgCfg: "/usr/lib/postgresql/16/bin", servers: []string{"/usr/lib/postgresql/16/bin"}, wantErr: true,
		},
		{
			name: "pg_config before the highest installed version", pgCfg: "/usr/lib/postgresql/10/bin", glob: glob,
			servers: []string{"/usr/lib/postgresql/10/bin", "/usr/lib/postgresql/16/bin"}, want: "/usr/lib/postgresql/10/bin",
		},
		{
			name: "highest version when pg_config has no server (libpq-dev only)", pgCfg: "/usr/lib/postgresql/17/bin", glob: glob,
			servers: []string{"/usr/lib/postgresql/9.6/bin", "/usr/lib/postgresql/10/bin", "/usr/lib/postgresql/16/bin"},
			want:    "/usr/lib/postgresql/16/bin",
		},
		{
			name: "next version when the highest is client-only", glob: glob,
			servers: []string{"/usr/lib/postgresql/9.6/bin", "/usr/lib/postgresql/10/bin"}, want: "/usr/lib/postgresql/10/bin",
		},
		{
			name: "PATH last", glob: glob, path: "/usr/local/pgsql/bin/initdb",
			servers: []string{"/usr/local/pgsql/bin"}, want: "/usr/local/pgsql/bin",
		},
		{name: "nothing", glob: glob, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := binFinder{
				getenv: kittest.FakeEnv(tc.env),
				pgConfig: func() (string, error) {
					if tc.pgCfg == "" {
						return "", errors.New("pg_config: not found")
					}
					return tc.pgCfg, nil
				},
				glob: func(string) ([]string, error) { return slices.Clone(tc.glob), nil },
				lookPath: func(string) (string, error) {
					if tc.path == "" {
						return "", errors.New("not in PATH")
					}
					return tc.path, nil
				},
				isServer: func(dir string) bool { return slices.Contains(tc.servers, dir) },
			}
			got, err := f.find()
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("find() = %q, %v; want %q, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestLocalBinariesOnThisMachine(t *testing.T) {
	t.Parallel()
	dir, err := system.find()
	if err != nil {
		if proc.IsCI(os.Getenv) {
			t.Fatalf("CI=true and %v", err)
		}
		t.Skip(err)
	}
	if !system.isServer(dir) {
		t.Errorf("find() = %q, which holds no initdb and postgres", dir)
	}
	t.Logf("server binaries in %s", dir)
}

func TestSelectVersionOrder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b string
		less bool
	}{
		{"9.6", "10", true}, {"10", "9.6", false}, {"15", "16", true}, {"16", "16", false},
		{"9.5", "9.6", true}, {"16", "16.1", true}, {"beta", "16", false},
	}
	for _, tc := range tests {
		if got := VersionLess(tc.a, tc.b); got != tc.less {
			t.Errorf("VersionLess(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.less)
		}
	}
}
