package formation

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/pgbin"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/proc"
)

const autoctlDefaultPath = "/usr/bin/pg_autoctl" // where Debian's postgresql-NN-auto-failover installs it

var plainDatabaseName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

func (o Config) validate() error {
	err := o.check()
	if err != nil && !errors.Is(err, pgtx.ErrInvalidArgument) {
		err = fmt.Errorf("%w: %w", err, pgtx.ErrInvalidArgument)
	}
	return err
}

// check is validate without the wrapping of its error.
func (o Config) check() error {
	if o.Database != "" && !plainDatabaseName.MatchString(o.Database) {
		return fmt.Errorf("pgtxtest: formation.Config.Database %q: want a plain name (letters, digits, underscores)", o.Database)
	}
	for what, settings := range map[string]map[string]string{"Settings": o.Settings, "MonitorSettings": o.MonitorSettings} {
		if err := proc.ValidateSettings(settings); err != nil {
			return fmt.Errorf("pgtxtest: formation.Config.%s: %w", what, err)
		}
		for name, value := range settings {
			if strings.ContainsAny(value, "\r\n") {
				return fmt.Errorf("pgtxtest: formation.Config.%s: the value of %s contains a line break", what, name)
			}
		}
	}
	return nil
}

// findFormationTools returns the path of pg_autoctl and the directory of the
// PostgreSQL binaries it is to run.
func findFormationTools(getenv func(string) string) (bin, bindir string, err error) {
	if bin, err = autoctl.Find(getenv); err != nil {
		return "", "", err
	}
	if bindir, err = autoctlBindir(getenv); err != nil {
		return "", "", err
	}
	return bin, bindir, nil
}

// autoctl is pg_autoctl as the kit finds it: PGTX_TEST_PG_AUTOCTL, else
// PATH, else /usr/bin/pg_autoctl.
var autoctl = proc.Program{Name: "pg_auto_failover", Binary: "pg_autoctl", Env: "PGTX_TEST_PG_AUTOCTL",
	Default: autoctlDefaultPath, Package: "postgresql-15-auto-failover"}

// autoctlBindir returns a directory of PostgreSQL server binaries whose server has
// the pgautofailover extension: the local clusters' binaries (PGTX_TEST_PG_BINDIR
// when set) if theirs has it, else, unless PGTX_TEST_PG_BINDIR is set, the highest
// /usr/lib/postgresql/*/bin that has it (the extension is packaged per major
// version).
func autoctlBindir(getenv func(string) string) (string, error) {
	local, err := pgbin.Find()
	if err == nil && hasAutoFailover(local) {
		return local, nil
	}
	if getenv("PGTX_TEST_PG_BINDIR") != "" {
		if err != nil {
			return "", err
		}
		return "", fmt.Errorf("PGTX_TEST_PG_BINDIR=%s: that server has no pgautofailover extension", local)
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.SliceStable(dirs, func(i, j int) bool {
		return pgbin.VersionLess(filepath.Base(filepath.Dir(dirs[j])), filepath.Base(filepath.Dir(dirs[i])))
	})
	for _, dir := range dirs {
		if pgbin.IsServer(dir) && hasAutoFailover(dir) {
			return dir, nil
		}
	}
	if err != nil {
		return "", err
	}
	return "", fmt.Errorf("the PostgreSQL server in %s has no pgautofailover extension, nor has any in /usr/lib/postgresql/*/bin", local)
}

// hasAutoFailover tells whether the server of the binaries in bindir has the
// pgautofailover library: in pg_config --pkglibdir, or in ../lib where pg_config
// is missing (Debian's layout).
func hasAutoFailover(bindir string) bool {
	libdir := filepath.Join(filepath.Dir(bindir), "lib")
	ctx, cancel := context.WithTimeout(context.Background(), pgbin.ToolTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, filepath.Join(bindir, "pg_config"), "--pkglibdir").Output(); err == nil {
		libdir = strings.TrimSpace(string(out))
	}
	found, _ := filepath.Glob(filepath.Join(libdir, "pgautofailover.*"))
	return len(found) > 0
}

// missingFormation tells what a test does when pg_auto_failover cannot be found:
// under CI=true it fails, elsewhere it is skipped; msg says how to install it.
func missingFormation(getenv func(string) string, why error) (fail bool, msg string) {
	msg = "pgtxtest: this test needs pg_auto_failover (" + why.Error() + "). To run it, install it for the " +
		"local PostgreSQL server (e.g. apt-get install postgresql-15-auto-failover), or set PGTX_TEST_PG_AUTOCTL " +
		"to pg_autoctl and PGTX_TEST_PG_BINDIR to the binaries of a server that has the pgautofailover extension."
	if proc.IsCI(getenv) {
		return true, msg + " CI=true: a missing pg_auto_failover is a failure, not a skip."
	}
	return false, msg
}
