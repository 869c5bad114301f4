package pgtxtest

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx/pgtxtest/bouncer"
	"github.com/pgtx-go/pgtx/pgtxtest/faultproxy"
	"github.com/pgtx-go/pgtx/pgtxtest/formation"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// helperLinesEnv, set, makes TestHelperLinesChild run: it is the child test binary
// of TestKitReportsAtCallersLine.
const helperLinesEnv = "PGTXTEST_HELPER_LINES_CHILD"

// The kit's lines are attributed to the line of the caller's test that called it,
// as testing does for helpers: a test binary of this package runs
// TestHelperLinesChild, whose calls of the kit log, skip or fail, and every line it
// prints with a file:line is at one of the lines of this file marked "reported
// here" (each of which reports something) or "may report here" (which reports when
// the machine's server allows it), never in the kit's own files (select.go:180 was
// where Shared's first line pointed, inside sync.Once). The drop that fails in a
// cleanup shows that a cleanup the kit registers reports at the call that
// registered it.
func TestKitReportsAtCallersLine(t *testing.T) {
	if os.Getenv(helperLinesEnv) != "" {
		t.Skip("the child binary runs TestHelperLinesChild only")
	}
	t.Parallel()
	src, err := os.ReadFile("helper_lines_test.go")
	if err != nil {
		t.Fatal(err)
	}
	must, may := map[int]bool{}, map[int]bool{}
	for i, line := range strings.Split(string(src), "\n") {
		switch {
		case strings.HasSuffix(line, "// reported here"):
			must[i+1] = true
		case strings.HasSuffix(line, "// may report here"):
			may[i+1] = true
		}
	}
	if len(must) == 0 {
		t.Fatal("no line of helper_lines_test.go is marked")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperLinesChild$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), helperLinesEnv+"=1")
	out, err := cmd.CombinedOutput() // the child's subtests fail by design: err is expected
	t.Logf("child: %v\n%s", err, out)

	reported := regexp.MustCompile(`(?m)^\s+(\S+\.go):(\d+): (.*)$`)
	seen := map[int]bool{}
	for _, m := range reported.FindAllStringSubmatch(string(out), -1) {
		line, _ := strconv.Atoi(m[2])
		if m[1] != "helper_lines_test.go" || !(must[line] || may[line]) {
			t.Errorf("%s:%s: %s\nwant it at the line of helper_lines_test.go that called the kit", m[1], m[2], m[3])
			continue
		}
		seen[line] = true
	}
	for line := range must {
		if !seen[line] {
			t.Errorf("helper_lines_test.go:%d reported nothing; want a line there", line)
		}
	}
}

// TestHelperLinesChild calls the kit in every way that makes it log, skip or fail
// without starting servers beyond the shared one; TestKitReportsAtCallersLine reads
// where testing says each line came from.
func TestHelperLinesChild(t *testing.T) {
	if os.Getenv(helperLinesEnv) == "" {
		t.Skip("run by TestKitReportsAtCallersLine in a child test binary")
	}
	t.Run("Shared's first use", func(t *testing.T) {
		server.Shared(t) // reported here
	})
	t.Run("NewDatabase, a bad option", func(t *testing.T) {
		NewDatabase(t, WithMigrationsDir("/no/such/directory")) // reported here
	})
	t.Run("NewDatabase, no server", func(t *testing.T) {
		NewDatabase(t, WithServer(nil)) // reported here
	})
	t.Run("NewPool, a bad fault", func(t *testing.T) {
		NewPool(t, WithFailEveryCommitOnce("42P01")) // reported here
	})
	t.Run("Proxy.FailCommits, a bad code", func(t *testing.T) {
		p := faultproxy.New(t, "127.0.0.1:1")
		p.FailCommits(1, "42P01") // reported here
	})
	t.Run("Proxy.FailEveryCommitOnce, a bad code", func(t *testing.T) {
		p := faultproxy.New(t, "127.0.0.1:1")
		p.FailEveryCommitOnce("42P01") // reported here
	})
	t.Run("bouncer.New, no server", func(t *testing.T) {
		bouncer.New(t, nil, nil) // reported here
	})
	t.Run("server.NewStandby, no primary", func(t *testing.T) {
		server.NewStandby(t, nil) // reported here
	})
	t.Run("formation.New, a bad Config", func(t *testing.T) {
		formation.New(t, &formation.Config{Database: "not a name"}) // reported here
	})
	t.Run("server.New, a bad setting", func(t *testing.T) {
		server.New(t, &server.Config{Settings: map[string]string{"not a name": "1"}}) // reported here
	})
	t.Run("a drop that fails in a cleanup", func(t *testing.T) {
		s := server.Shared(t)
		if s.Kind() != server.KindLocal {
			t.SkipNow() // the template database below is left on no server but a throwaway one
		}
		var name string
		// Registered first, so it runs after the kit's drop: the database is
		// made droppable again and dropped.
		t.Cleanup(func() {
			_ = withAdmin(context.Background(), s, func(conn *pgx.Conn) error {
				_, _ = conn.Exec(context.Background(), "alter database "+pgx.Identifier{name}.Sanitize()+" is_template false")
				return dropDatabaseOn(context.Background(), conn, name)
			})
		})
		dsn := NewDatabase(t) // may report here
		u, err := url.Parse(dsn)
		if err != nil {
			t.FailNow()
		}
		name = strings.TrimPrefix(u.Path, "/")
		// A template database cannot be dropped: the kit's drop fails.
		_ = withAdmin(context.Background(), s, func(conn *pgx.Conn) error {
			_, err := conn.Exec(context.Background(), "alter database "+pgx.Identifier{name}.Sanitize()+" is_template true")
			return err
		})
	})
}
