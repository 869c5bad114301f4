package sqldb

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxgorm"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// entries is a gorm logger.Writer that keeps what it is given, one entry
// per Printf.
type entries struct {
	mu   sync.Mutex
	list []string
}

func (e *entries) Printf(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, fmt.Sprintf(format, args...))
}

func (e *entries) with(s string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var got []string
	for _, entry := range e.list {
		if strings.Contains(entry, s) {
			got = append(got, entry)
		}
	}
	return got
}

// raise40001 is a statement the server fails with a serialization failure.
const raise40001 = "do $$ begin raise exception 'forced conflict' using errcode = '40001'; end $$"

// TestConflictLog: with GORM's default logger, a statement's 40001 that pgtx
// then reruns is no error line (an info note at LogLevel Info), while a
// 40001 that is not rerun and a unique violation still are one, naming the
// caller's file.
func TestConflictLog(t *testing.T) {
	tests := []struct {
		name  string
		level logger.LogLevel
		opts  pgtx.Options
		fn    func(runs int) func(tx *gorm.DB) error
		code  string // the SQLSTATE of fn's failed statement
		// wantErr: the call's error; wantEntry: the prefix of the one entry
		// naming code ("" for none).
		wantErr   bool
		wantEntry string
	}{
		{"a rerun 40001, LogLevel Warn", logger.Warn, pgtx.Options{}, conflictOnce, "40001", false, ""},
		{"a rerun 40001, LogLevel Info", logger.Info, pgtx.Options{}, conflictOnce, "40001", false, "[info] "},
		{"a rerun 40001 under tx.Debug()", logger.Warn, pgtx.Options{}, func(runs int) func(tx *gorm.DB) error {
			return func(tx *gorm.DB) error { return conflictOnce(runs)(tx.Debug()) }
		}, "40001", false, "[info] "},
		{"a 40001 not rerun (MaxRetries -1)", logger.Warn, pgtx.Options{MaxRetries: -1}, conflictOnce, "40001", true, "logger_test.go:"},
		{"a 23505, LogLevel Warn", logger.Warn, pgtx.Options{}, duplicate, "23505", true, "logger_test.go:"},
		{"a 23505, LogLevel Info", logger.Info, pgtx.Options{}, duplicate, "23505", true, "logger_test.go:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &entries{}
			db := serverGORM(t, &gorm.Config{Logger: logger.New(w, logger.Config{LogLevel: tt.level})})
			if err := db.WithContext(t.Context()).Create(&Account{ID: 1, Balance: 1}).Error; err != nil {
				t.Fatal(err)
			}
			runs := 0
			err := pgtxgorm.TransactionWithOptions(t.Context(), db, pgtx.Serializable, tt.opts, func(tx *gorm.DB) error {
				runs++
				return tt.fn(runs)(tx)
			})
			var pgErr *pgconn.PgError
			switch {
			case tt.wantErr && !(errors.As(err, &pgErr) && pgErr.Code == tt.code):
				t.Fatalf("err = %v, want SQLSTATE %s", err, tt.code)
			case !tt.wantErr && (err != nil || runs != 2):
				t.Fatalf("err = %v after %d runs of fn, want nil after 2", err, runs)
			}
			got := w.with("SQLSTATE " + tt.code)
			if tt.wantEntry == "" {
				if len(got) != 0 {
					t.Fatalf("the log has %q, want nothing about SQLSTATE %s", got, tt.code)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("the log has %q about SQLSTATE %s, want one entry", got, tt.code)
			}
			if !strings.Contains(got[0], tt.wantEntry) || !strings.Contains(got[0], "logger_test.go:") {
				t.Errorf("the log has %q, want an entry with %q naming the caller's file", got[0], tt.wantEntry)
			}
		})
	}
}

// conflictOnce fails its first run with a 40001.
func conflictOnce(runs int) func(tx *gorm.DB) error {
	return func(tx *gorm.DB) error {
		if err := tx.Model(&Account{}).Where("id = ?", 1).Update("balance", 2).Error; err != nil {
			return err
		}
		if runs == 1 {
			return tx.Exec(raise40001).Error
		}
		return nil
	}
}

// duplicate inserts a row whose key is taken: a 23505, not rerun.
func duplicate(int) func(tx *gorm.DB) error {
	return func(tx *gorm.DB) error {
		return tx.Create(&Account{ID: 1, Balance: 1}).Error
	}
}
