package pgtxgorm

// The name of this file ends in .gen.go because GORM's loggers name the
// first caller outside GORM and outside files so named: a statement's log
// entry then names the caller's line, not this file's.

import (
	"context"
	"time"

	"github.com/pgtx-go/pgtx"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// rerunLogger is the logger of fn's session: a statement's conflict (40001,
// 40P01) in an attempt, which pgtx reruns the transaction for, is an Info
// note, not an error; everything else goes to the session's logger as is.
type rerunLogger struct{ log logger.Interface }

// LogMode implements [logger.Interface].
func (l rerunLogger) LogMode(level logger.LogLevel) logger.Interface {
	return rerunLogger{l.log.LogMode(level)}
}

// Info implements [logger.Interface].
func (l rerunLogger) Info(ctx context.Context, msg string, data ...any) {
	l.log.Info(ctx, msg, data...)
}

// Warn implements [logger.Interface].
func (l rerunLogger) Warn(ctx context.Context, msg string, data ...any) {
	l.log.Warn(ctx, msg, data...)
}

// Error implements [logger.Interface].
func (l rerunLogger) Error(ctx context.Context, msg string, data ...any) {
	l.log.Error(ctx, msg, data...)
}

// Trace implements [logger.Interface].
func (l rerunLogger) Trace(ctx context.Context, begin time.Time, fc func() (sql string, rows int64), err error) {
	if err == nil || pgtx.Attempt(ctx) == 0 || pgtx.Classify(err) != pgtx.ClassConflict {
		l.log.Trace(ctx, begin, fc, err)
		return
	}
	sql, rows := fc()
	l.log.Info(ctx, "conflict, which pgtx reruns the transaction for unless its retries are spent: %v\n[%.3fms] [rows:%v] %s",
		err, float64(time.Since(begin).Nanoseconds())/1e6, rows, sql)
}

// ParamsFilter implements [gorm.ParamsFilter] as the session's logger does.
func (l rerunLogger) ParamsFilter(ctx context.Context, sql string, params ...any) (string, []any) {
	if f, ok := l.log.(gorm.ParamsFilter); ok {
		return f.ParamsFilter(ctx, sql, params...)
	}
	return sql, params
}
