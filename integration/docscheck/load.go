package docscheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// External are the packages of other modules whose names users read in
// pgtx's documents.
var External = []string{
	"context", "errors", "time", "database/sql", "database/sql/driver", "log/slog", "testing", "net",
	"github.com/jackc/pgx/v5", "github.com/jackc/pgx/v5/pgxpool", "github.com/jackc/pgx/v5/pgconn",
	"github.com/jackc/pgx/v5/pgtype", "github.com/jackc/pgx/v5/stdlib", "github.com/jackc/pgx/v5/tracelog",
	"github.com/jackc/pgerrcode", "github.com/jmoiron/sqlx", "gorm.io/gorm", "gorm.io/gorm/logger",
	"github.com/prometheus/client_golang/prometheus", "go.opentelemetry.io/otel",
	"github.com/exaring/otelpgx",
}

// Others are packages of the modules beside the integration module whose
// names the documents give: the ORMs of examples/orm, and cockroach-go,
// which the bench measures. Keys are module directories.
var Others = map[string][]string{
	"examples/orm": {"github.com/uptrace/bun", "entgo.io/ent"},
	"bench":        {"github.com/cockroachdb/cockroach-go/v2/crdb/crdbpgxv5"},
}

// Foreign are names in backquotes that are no Go package's: each with where
// it comes from.
var Foreign = map[string]string{
	"ApplyWalRecord":                      "PostgreSQL's C source (xlogrecovery.c)",
	"AdvanceNextFullTransactionIdPastXid": "PostgreSQL's C source (varsup.c)",
}

// Load returns the API of the repository at root: pgtx's packages, the
// examples' types and the External packages, located from dir.
func Load(root, dir string) (*API, error) {
	a := NewAPI()
	if err := LoadRepo(a, root); err != nil {
		return nil, err
	}
	if err := LoadExternal(a, dir, External...); err != nil {
		return nil, err
	}
	mods := make([]string, 0, len(Others))
	for m := range Others {
		mods = append(mods, m)
	}
	sort.Strings(mods)
	for _, m := range mods {
		if err := LoadExternal(a, filepath.Join(root, m), Others[m]...); err != nil {
			return nil, err
		}
	}
	return a, nil
}

var baseLine = regexp.MustCompile("`(v[0-9][^`]*)` at commit `([0-9a-f]{40})`")

// PreviousRelease returns the version before CHANGELOG.md's newest and its
// commit: the tag of that version, or the commit RELEASING.md names for it,
// now or in its history.
func PreviousRelease(root string) (version, commit string, err error) {
	cl, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		return "", "", err
	}
	vs := Versions(string(cl))
	if len(vs) < 2 {
		return "", "", fmt.Errorf("CHANGELOG.md has fewer than two versions: %v", vs)
	}
	version = vs[1]
	commit, err = ReleaseCommit(root, version)
	if err != nil {
		return "", "", fmt.Errorf("%w, the release before CHANGELOG.md's newest", err)
	}
	return version, commit, nil
}

// ReleaseCommit returns the commit of release version: its tag, or the
// commit RELEASING.md names for it, now or in its history.
func ReleaseCommit(root, version string) (string, error) {
	if out, err := git(root, "rev-parse", "--verify", "-q", version+"^{commit}"); err == nil {
		return strings.TrimSpace(string(out)), nil
	}
	rel, err := os.ReadFile(filepath.Join(root, "RELEASING.md"))
	if err != nil {
		return "", err
	}
	// RELEASING.md names the last release; once the next is cut, its
	// history still does.
	hist, _ := git(root, "log", "--format=", "-p", "-S", "`"+version+"` at commit", "--", "RELEASING.md")
	for _, text := range []string{string(rel), string(hist)} {
		for _, m := range baseLine.FindAllStringSubmatch(text, -1) {
			if m[1] == version {
				return m[2], nil
			}
		}
	}
	return "", fmt.Errorf("no commit for %s: neither a tag nor a line \"`%s` at commit `<40 hex>`\" in RELEASING.md or its history", version, version)
}
