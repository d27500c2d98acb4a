// Package tracing turns the storefront's OpenTelemetry traces on from the standard
// environment variables, and hands the instrumentation of the ecosystem's own libraries to
// the command's wiring: otelgin for the Gin engine, go-redis's redisotel for the Redis
// clients, XSAM/otelsql around the database driver. The spans that only the storefront can
// name (the lock's wait and hold, a hold's write) are inventory's; they come through the
// tracer this package returns.
//
// Tracing is off unless OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
// is set: then FromEnv returns nil, and nothing is installed anywhere (no middleware, no
// driver wrapper, no Redis hook; inventory's tracer is nil).
package tracing

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/XSAM/otelsql"
	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/github.com/gin-gonic/gin/otelgin"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// The environment variables FromEnv reads (the OpenTelemetry specification's names).
const (
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvServiceName    = "OTEL_SERVICE_NAME"
	EnvSampler        = "OTEL_TRACES_SAMPLER"
	EnvSamplerArg     = "OTEL_TRACES_SAMPLER_ARG"
	EnvSDKDisabled    = "OTEL_SDK_DISABLED"
	EnvExporter       = "OTEL_TRACES_EXPORTER"
)

// DefaultServiceName is the service name when OTEL_SERVICE_NAME is not set.
const DefaultServiceName = "stockguard"

// Name is the instrumentation scope of the storefront's own spans.
const Name = "github.com/stockguard/stockguard"

// Tracing is the process's tracing: an SDK tracer provider exporting OTLP over HTTP, and the
// instrumentation of Gin, Redis and the database driver bound to it. A nil *Tracing is
// tracing off: every method is then a no-op that installs nothing.
type Tracing struct {
	tp      *sdktrace.TracerProvider
	service string
}

// FromEnv returns the process's tracing as getenv configures it, or nil, nil when tracing is
// off: no OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT, or the traces-only
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none.
// The exporter speaks OTLP over HTTP (protobuf; the endpoint is a URL such as
// http://jaeger:4318, the path /v1/traces added to the general endpoint as the specification
// says); OTEL_SERVICE_NAME names the service (default "stockguard") and OTEL_TRACES_SAMPLER
// with OTEL_TRACES_SAMPLER_ARG choose the sampler (default parentbased_always_on). It fails
// on a bad endpoint URL, an exporter other than otlp, or a sampler it does not know.
func FromEnv(getenv func(string) string) (*Tracing, error) {
	if strings.EqualFold(strings.TrimSpace(getenv(EnvSDKDisabled)), "true") {
		return nil, nil
	}
	switch exp := strings.TrimSpace(getenv(EnvExporter)); exp {
	case "none":
		return nil, nil
	case "", "otlp":
	default:
		return nil, fmt.Errorf("tracing: %s=%q: only otlp (or none) is supported", EnvExporter, exp)
	}
	var opt otlptracehttp.Option
	if u := strings.TrimSpace(getenv(EnvTracesEndpoint)); u != "" {
		opt = otlptracehttp.WithEndpointURL(u) // used as it is: its path is the traces path
	} else if u := strings.TrimSpace(getenv(EnvEndpoint)); u != "" {
		full, err := tracesURL(u)
		if err != nil {
			return nil, err
		}
		opt = otlptracehttp.WithEndpointURL(full)
	} else {
		return nil, nil
	}
	sampler, err := samplerOf(getenv(EnvSampler), getenv(EnvSamplerArg))
	if err != nil {
		return nil, err
	}
	service := strings.TrimSpace(getenv(EnvServiceName))
	if service == "" {
		service = DefaultServiceName
	}
	// New only builds the client: nothing is dialled until the first batch is exported.
	exp, err := otlptracehttp.New(context.Background(), opt)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res := resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(service))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sampler),
	)
	return &Tracing{tp: tp, service: service}, nil
}

// tracesURL is the general OTLP endpoint u with the traces path appended, as the
// specification asks of OTEL_EXPORTER_OTLP_ENDPOINT for OTLP over HTTP.
func tracesURL(u string) (string, error) {
	if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		return "", fmt.Errorf("tracing: %s=%q: want an http:// or https:// URL (OTLP over HTTP, port 4318)", EnvEndpoint, u)
	}
	return strings.TrimRight(u, "/") + "/v1/traces", nil
}

// samplerOf is the sampler the specification's OTEL_TRACES_SAMPLER names (arg: its
// OTEL_TRACES_SAMPLER_ARG, the ratio of the traceidratio ones, default 1).
func samplerOf(name, arg string) (sdktrace.Sampler, error) {
	ratio := 1.0
	if a := strings.TrimSpace(arg); a != "" && strings.Contains(name, "traceidratio") {
		r, err := strconv.ParseFloat(a, 64)
		if err != nil || r < 0 || r > 1 {
			return nil, fmt.Errorf("tracing: %s=%q: want a ratio from 0 to 1", EnvSamplerArg, arg)
		}
		ratio = r
	}
	switch strings.TrimSpace(name) {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio), nil
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)), nil
	}
	return nil, fmt.Errorf("tracing: %s=%q: want always_on, always_off, traceidratio or their parentbased_ forms", EnvSampler, name)
}

// Service returns the service name the spans are exported under ("" when off).
func (t *Tracing) Service() string {
	if t == nil {
		return ""
	}
	return t.service
}

// Tracer returns the tracer of the storefront's own spans, or nil when tracing is off
// (inventory.Config.Tracer: nil is no spans at all).
func (t *Tracing) Tracer() trace.Tracer {
	if t == nil {
		return nil
	}
	return t.tp.Tracer(Name)
}

// Gin returns otelgin's middleware (a server span per request, W3C trace context taken from
// the request's headers), or nil when tracing is off. Requests that are not the storefront's
// API are left out: /metrics, the health checks and the pages' static files.
func (t *Tracing) Gin() gin.HandlerFunc {
	if t == nil {
		return nil
	}
	return otelgin.Middleware(t.service,
		otelgin.WithTracerProvider(t.tp),
		otelgin.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})),
		otelgin.WithGinFilter(func(c *gin.Context) bool { return strings.HasPrefix(c.Request.URL.Path, "/api/") }),
	)
}

// InstrumentRedis installs redisotel's tracing hook (a span per command or pipeline) on each
// of clients (a client listed twice is instrumented once), for the calls made within a
// traced request or hold (childOnly: a lock's renewals, from its watchdog, make no traces of
// their own). With tracing off it installs nothing.
func (t *Tracing) InstrumentRedis(clients ...redis.UniversalClient) error {
	if t == nil {
		return nil
	}
	seen := make(map[redis.UniversalClient]bool, len(clients))
	for _, c := range clients {
		if c == nil || seen[c] {
			continue
		}
		seen[c] = true
		if err := redisotel.InstrumentTracing(c, redisotel.WithTracerProvider(childOnly{t.tp}), redisotel.WithDBStatement(true)); err != nil {
			return fmt.Errorf("tracing: redis: %w", err)
		}
	}
	return nil
}

// OpenDB returns the database opener of models.WithOpenDB: otelsql around the driver's
// connector (a span per statement, prepared or not, per transaction's begin, commit and
// rollback) within a traced request or hold (childOnly), or nil when tracing is off (models then opens the driver as it is).
func (t *Tracing) OpenDB(system string) func(driver.Connector) *sql.DB {
	if t == nil {
		return nil
	}
	return func(c driver.Connector) *sql.DB {
		return otelsql.OpenDB(c,
			otelsql.WithTracerProvider(childOnly{t.tp}),
			otelsql.WithAttributes(attribute.String("db.system.name", system)),
			otelsql.WithSpanOptions(otelsql.SpanOptions{
				OmitConnResetSession: true, // one per pooled connection taken: noise
				OmitRows:             true, // rows.Next and Close: the statement's span says enough
				OmitConnectorConnect: true,
				DisableErrSkip:       true,
			}))
	}
}

// Shutdown flushes the spans not exported yet and stops the exporter, within ctx. A nil
// Tracing has nothing to do.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	err := t.tp.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("tracing: spans not exported before the shutdown's deadline: %w", err)
	}
	return err
}

// Close is Shutdown bounded by CloseTimeout.
func (t *Tracing) Close() error {
	if t == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), CloseTimeout)
	defer cancel()
	return t.Shutdown(ctx)
}

// CloseTimeout bounds Close: an unreachable collector does not hold up the process's exit.
const CloseTimeout = 5 * time.Second

// Provider returns the tracer provider (nil when off), for tests that flush it.
func (t *Tracing) Provider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t.tp
}

// childOnly is a TracerProvider whose tracers start a span only under a span already in the
// context: the libraries' spans (a Redis command, an SQL statement) belong to a request or a
// hold, and the background's calls (a lock's renewals, the holds' expiry) start no trace.
type childOnly struct{ trace.TracerProvider }

func (p childOnly) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return childTracer{p.TracerProvider.Tracer(name, opts...)}
}

type childTracer struct{ trace.Tracer }

func (t childTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, trace.SpanFromContext(ctx) // the context's non-recording span
	}
	return t.Tracer.Start(ctx, name, opts...)
}
