package main

import (
	"context"
	"io"
	"log/slog"
)

// newLogger returns a text logger on w that drops records below level, except the start-up
// notices logged with notice: those are always written, so the "listening" line (which the
// load test reads), the Redis mode and a generated admin token show even with --log-level=warn.
func newLogger(w io.Writer, level slog.Level) *slog.Logger {
	base := slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})
	return slog.New(levelHandler{Handler: base, level: level})
}

type alwaysKey struct{}

// notice logs msg at INFO whatever the logger's level.
func notice(logger *slog.Logger, msg string, args ...any) {
	logger.Log(context.WithValue(context.Background(), alwaysKey{}, true), slog.LevelInfo, msg, args...)
}

// levelHandler filters by level, letting notices through.
type levelHandler struct {
	slog.Handler
	level slog.Level
}

func (h levelHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.level || ctx.Value(alwaysKey{}) != nil
}

func (h levelHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return levelHandler{Handler: h.Handler.WithAttrs(attrs), level: h.level}
}

func (h levelHandler) WithGroup(name string) slog.Handler {
	return levelHandler{Handler: h.Handler.WithGroup(name), level: h.level}
}
