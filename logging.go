package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel/trace"
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

// Handle writes r, with the trace_id and span_id of the span in ctx if there is one, and with its message and string or error attributes on one line (oneLine). A
// record without a line break (nearly all) passes through as it is.
func (h levelHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		// A line of a traced request or hold: its trace and span, to find it in the tracing
		// backend (internal/tracing; nothing is in ctx with tracing off).
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	if !multiLine(r) {
		return h.Handler.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, oneLine(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		switch v := a.Value.Any().(type) {
		case error:
			a.Value = slog.StringValue(oneLine(v.Error()))
		case string:
			a.Value = slog.StringValue(oneLine(v))
		}
		out.AddAttrs(a)
		return true
	})
	return h.Handler.Handle(ctx, out)
}

// multiLine reports whether r's message or a string or error attribute has a line break.
func multiLine(r slog.Record) bool {
	found := strings.ContainsAny(r.Message, "\r\n")
	r.Attrs(func(a slog.Attr) bool {
		switch a.Value.Kind() {
		case slog.KindString:
			found = found || strings.ContainsAny(a.Value.String(), "\r\n")
		case slog.KindAny:
			if err, ok := a.Value.Any().(error); ok {
				found = found || strings.ContainsAny(err.Error(), "\r\n")
			}
		}
		return !found
	})
	return found
}

func (h levelHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return levelHandler{Handler: h.Handler.WithAttrs(attrs), level: h.level}
}

func (h levelHandler) WithGroup(name string) slog.Handler {
	return levelHandler{Handler: h.Handler.WithGroup(name), level: h.level}
}

// redisLogger routes go-redis's own log lines (its pool logs every refused dial, such as those
// while a Redis child boots) to the logger at debug level.
type redisLogger struct{ logger *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	if l.logger.Enabled(ctx, slog.LevelDebug) {
		l.logger.DebugContext(ctx, "go-redis: "+oneLine(fmt.Sprintf(format, v...)), "component", "go-redis")
	}
}

// oneLine folds a multi-line text (a driver's error listing each address it tried) onto one
// line, so that every log record stays one line without escaped newlines.
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' })
	for i := range fields {
		fields[i] = strings.TrimSpace(fields[i])
	}
	return strings.Join(fields, "; ")
}
