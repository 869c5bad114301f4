package pgtxtest

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// Bounds of building a template database.
const (
	// templateTimeout bounds building one template: waiting for another builder,
	// creating it, migrating it.
	templateTimeout = 5 * time.Minute
	// templateIdleTimeout bounds waiting for the migrating session to be gone from
	// the server once it is closed.
	templateIdleTimeout = 10 * time.Second
	// templateFormatDB is hashed into every template's name: bump it when what a
	// template holds for the same migrations changes.
	templateFormatDB = "pgtxtest template v1"
	// templatePrefix starts the name of every migrated template.
	templatePrefix = "pgtxtest_tmpl_"
)

// templateName is the name of the template database for steps: a hash of the
// names and contents of the files, and the keys of the functions, in order.
func templateName(steps []step) string {
	h := sha256.New()
	field := func(kind byte, s string) {
		var n [9]byte
		n[0] = kind
		binary.BigEndian.PutUint64(n[1:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field('v', templateFormatDB)
	for _, st := range steps {
		if st.fn != nil {
			field('g', st.name)
		} else {
			field('f', st.name)
			field('s', st.sql)
		}
	}
	return templatePrefix + hex.EncodeToString(h.Sum(nil))[:32]
}

// templateLockKey is the advisory lock key that serializes the builders of the
// template database name, across sessions and test binaries.
func templateLockKey(name string) int64 {
	sum := sha256.Sum256([]byte("pgtxtest template lock\x00" + name))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// templateState is what this test binary knows of one template on one server.
type templateState struct {
	mu    sync.Mutex // held while this binary checks or builds the template
	ready bool
}

// forget makes the template's next user look for it on the server again.
func (st *templateState) forget() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.ready = false
}

// serverState is what this test binary knows of one server for its databases.
type serverState struct {
	noCreateDB atomic.Bool // the role was refused CREATE DATABASE: NewDatabase makes schemas

	tmplMu    sync.Mutex
	templates map[string]*templateState // the migrated templates this binary used, by name
}

var serverStates sync.Map // *server.Server → *serverState

// stateOf returns what this binary knows of s.
func stateOf(s *server.Server) *serverState {
	if st, ok := serverStates.Load(s); ok {
		return st.(*serverState)
	}
	st, _ := serverStates.LoadOrStore(s, &serverState{})
	return st.(*serverState)
}

// template returns the state of the named template on the server.
func (s *serverState) template(name string) *templateState {
	s.tmplMu.Lock()
	defer s.tmplMu.Unlock()
	if s.templates == nil {
		s.templates = make(map[string]*templateState)
	}
	st := s.templates[name]
	if st == nil {
		st = &templateState{}
		s.templates[name] = st
	}
	return st
}

// ensureDBTemplate returns the name of the template database for steps on s, making
// it first if it does not exist. Tests of this binary that need the same template
// wait for one of them to make it; other binaries wait on the advisory lock.
func ensureDBTemplate(ctx context.Context, s *server.Server, steps []step) (string, error) {
	name := templateName(steps)
	st := stateOf(s).template(name)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.ready {
		return name, nil
	}
	if err := buildTemplate(ctx, s, name, steps); err != nil {
		return "", err
	}
	st.ready = true
	return name, nil
}

// buildTemplate makes the template database name with steps applied, unless it is
// there already, holding the advisory lock of its name on an admin connection. A
// template is ready once it IS_TEMPLATE: that is set last, after the migrations and
// once no session is connected to it, so a ready template can be copied at once.
func buildTemplate(ctx context.Context, s *server.Server, name string, steps []step) error {
	return withAdmin(ctx, s, func(admin *pgx.Conn) error {
		if ready, _, err := templateStatus(ctx, admin, name); err != nil || ready {
			return err
		}
		if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock($1)", templateLockKey(name)); err != nil {
			return fmt.Errorf("wait for the template lock: %w", err)
		}
		// Closing the admin connection releases the lock too, if the unlock fails.
		defer func() {
			_, _ = admin.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", templateLockKey(name))
		}()
		ready, exists, err := templateStatus(ctx, admin, name)
		if err != nil || ready {
			return err
		}
		if exists {
			// Left unfinished by a builder that died: its lock went with it.
			if err := dropDatabaseOn(ctx, admin, name); err != nil {
				return fmt.Errorf("drop the unfinished template %s: %w", name, err)
			}
		}
		ident := pgx.Identifier{name}.Sanitize()
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+ident+" TEMPLATE template0"); err != nil {
			return err
		}
		err = migrateDSN(ctx, s.DSN(name), steps)
		if err == nil {
			err = waitNoSessions(ctx, admin, name)
		}
		if err == nil {
			_, err = admin.Exec(ctx, "COMMENT ON DATABASE "+ident+" IS "+quoteLiteral(templateComment(steps)))
		}
		if err == nil {
			_, err = admin.Exec(ctx, "ALTER DATABASE "+ident+" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false")
		}
		if err != nil {
			err = fmt.Errorf("template %s: %w", name, err)
			if derr := dropDatabaseOn(context.WithoutCancel(ctx), admin, name); derr != nil {
				err = errors.Join(err, fmt.Errorf("drop the failed template: %w", derr))
			}
			return err
		}
		return nil
	})
}

// templateStatus reports whether the database name exists and is a ready template.
func templateStatus(ctx context.Context, admin *pgx.Conn, name string) (ready, exists bool, err error) {
	err = admin.QueryRow(ctx, "SELECT datistemplate FROM pg_database WHERE datname = $1", name).Scan(&ready)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, false, nil
	case err != nil:
		return false, false, fmt.Errorf("look for template %s: %w", name, err)
	}
	return ready, true, nil
}

// migrateDSN runs steps, in order, on one connection to dsn, and closes it.
func migrateDSN(ctx context.Context, dsn string, steps []step) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect to migrate: %w", err)
	}
	err = migrate(ctx, conn, steps)
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return errors.Join(err, conn.Close(closeCtx))
}

// migrate runs steps on conn: an SQL file as one simple-protocol query (it may
// hold several statements), a function as is.
func migrate(ctx context.Context, conn *pgx.Conn, steps []step) error {
	for _, st := range steps {
		var err error
		if st.fn != nil {
			err = st.fn(ctx, conn)
			if err == nil && conn.IsClosed() {
				err = errors.New("the function closed the connection")
			}
			if err != nil {
				return fmt.Errorf("migration %s (WithMigrate): %w", st.name, err)
			}
			continue
		}
		if _, err = conn.PgConn().Exec(ctx, st.sql).ReadAll(); err != nil {
			return fmt.Errorf("migration %s: %w", st.name, err)
		}
	}
	return nil
}

// waitNoSessions waits until no session is connected to database name: a closed
// connection's backend leaves a moment after the client, and CREATE DATABASE ...
// TEMPLATE refuses a template with a session, or waits for it.
func waitNoSessions(ctx context.Context, admin *pgx.Conn, name string) error {
	ctx, cancel := context.WithTimeout(ctx, templateIdleTimeout)
	defer cancel()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", name).Scan(&n); err != nil {
			return fmt.Errorf("wait for the template's sessions to end: %w", err)
		}
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for the template's sessions to end: %d still connected: %w", n, ctx.Err())
		case <-tick.C:
		}
	}
}

// templateComment describes a template's migrations, for whoever finds it on the
// server.
func templateComment(steps []step) string {
	names := make([]string, len(steps))
	for i, st := range steps {
		names[i] = st.name
	}
	c := "pgtxtest template, migrations: " + strings.Join(names, ", ")
	if len(c) > 1000 {
		c = c[:1000] + "..."
	}
	return c
}

// quoteLiteral quotes s as an SQL string literal. Backslashes become slashes, so
// that the literal means the same whatever standard_conforming_strings says.
func quoteLiteral(s string) string {
	s = strings.ToValidUTF8(strings.NewReplacer("\\", "/", "\x00", "").Replace(s), "?")
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
