package models

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// gormLogger sends GORM's statement log to slog: slow statements at Warn, failed ones at Debug
// (their callers decide what a failure means and log it themselves). It renders a statement's
// SQL only when it logs it.
//
// While gorm.Open runs (opening), GORM's own Error lines go to Debug too: the one it writes
// there ("failed to initialize database, got error ...") repeats the error gorm.Open returns,
// which Open wraps and its caller logs once (the command's "stockguard failed"). Once the
// database is open (openGorm), they are errors again.
type gormLogger struct {
	log     *slog.Logger
	slow    time.Duration
	opening bool
}

var _ logger.Interface = gormLogger{}

func (l gormLogger) LogMode(logger.LogLevel) logger.Interface { return l }

func (l gormLogger) Info(ctx context.Context, msg string, args ...any) {
	l.log.InfoContext(ctx, fmt.Sprintf(msg, args...))
}

func (l gormLogger) Warn(ctx context.Context, msg string, args ...any) {
	l.log.WarnContext(ctx, fmt.Sprintf(msg, args...))
}

func (l gormLogger) Error(ctx context.Context, msg string, args ...any) {
	if l.opening {
		l.log.DebugContext(ctx, fmt.Sprintf(msg, args...))
		return
	}
	l.log.ErrorContext(ctx, fmt.Sprintf(msg, args...))
}

func (l gormLogger) Trace(ctx context.Context, begin time.Time, fc func() (string, int64), err error) {
	elapsed := time.Since(begin)
	switch {
	case err != nil && !errors.Is(err, gorm.ErrRecordNotFound) && l.log.Enabled(ctx, slog.LevelDebug):
		sql, _ := fc()
		l.log.DebugContext(ctx, "sql failed", "sql", sql, "elapsed", elapsed, "err", err)
	case l.slow > 0 && elapsed > l.slow && l.log.Enabled(ctx, slog.LevelWarn):
		sql, rows := fc()
		l.log.WarnContext(ctx, "slow sql", "sql", sql, "rows", rows, "elapsed", elapsed)
	}
}
