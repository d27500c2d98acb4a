package main

import (
	"context"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/tracing"
	"github.com/stockguard/stockguard/models"
)

// There is no Docker engine where the tests run: these tests load docker-compose.yml with the
// compose-spec loader (the one docker compose uses) and check its shape, and check that the
// Dockerfile and nginx config agree with it. deploy/nginx_test.go runs the nginx config itself
// in a real nginx in front of three storefront processes.

const storefrontPort = 8080

var storefronts = []string{"storefront-1", "storefront-2", "storefront-3"}

func loadCompose(t *testing.T, env ...string) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{"docker-compose.yml"},
		cli.WithWorkingDirectory("."),
		cli.WithEnv(env),
		cli.WithInterpolation(true),
		cli.WithResolvedPaths(false),
	)
	require.NoError(t, err)
	p, err := opts.LoadProject(context.Background())
	require.NoError(t, err)
	return p
}

func TestComposeFile(t *testing.T) {
	p := loadCompose(t, "ADMIN_TOKEN=compose-test-token")
	assert.Equal(t, "stockguard", p.Name)
	assert.ElementsMatch(t, append([]string{"postgres", "redis", "nginx"}, storefronts...), p.ServiceNames())

	pg, err := p.GetService("postgres")
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(pg.Image, "postgres:"), pg.Image)
	assertHealthCheck(t, pg, "pg_isready")
	assert.Empty(t, pg.Ports, "PostgreSQL is not published on the host")
	require.Len(t, pg.Volumes, 1, "the database lives on a volume")
	assert.Equal(t, types.VolumeTypeVolume, pg.Volumes[0].Type)
	assert.Equal(t, "pgdata", pg.Volumes[0].Source)
	assert.Equal(t, "/var/lib/postgresql/data", pg.Volumes[0].Target)
	require.Contains(t, p.Volumes, "pgdata")
	pgEnv := map[string]string{}
	for k, v := range pg.Environment {
		require.NotNil(t, v, "postgres: %s has no value", k)
		pgEnv[k] = *v
	}

	redis, err := p.GetService("redis")
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(redis.Image, "redis:"), redis.Image)
	assertHealthCheck(t, redis, "redis-cli")
	assert.Empty(t, redis.Ports, "Redis is not published on the host")

	var firstEnv map[string]string
	for _, name := range storefronts {
		s, err := p.GetService(name)
		require.NoError(t, err)
		require.NotNil(t, s.Build, "%s is built from the Dockerfile", name)
		assert.Equal(t, "Dockerfile", s.Build.Dockerfile)
		assert.Empty(t, s.Ports, "%s is reached through nginx only", name)
		assert.Contains(t, []string(s.Expose), "8080")
		assertHealthCheck(t, s, "/readyz")
		for _, dep := range []string{"redis", "postgres"} {
			require.Contains(t, s.DependsOn, dep)
			assert.Equal(t, types.ServiceConditionHealthy, s.DependsOn[dep].Condition, "%s waits for %s", name, dep)
		}
		require.NotNil(t, s.StopGracePeriod)
		assert.Empty(t, s.Volumes, "%s keeps no state: the database is PostgreSQL", name)

		env := map[string]string{}
		for k, v := range s.Environment {
			require.NotNil(t, v, "%s: %s has no value", name, k)
			env[k] = *v
			assert.True(t, knownEnv(k) || slices.Contains(tracingEnv, k), "%s: %s is not a variable stockguard reads", name, k)
		}
		// The replicas reach the postgres service as the user, password and database it creates.
		u, err := url.Parse(env["DATABASE_URL"])
		require.NoError(t, err)
		assert.Equal(t, "postgres", u.Scheme)
		assert.Equal(t, "postgres:5432", u.Host)
		assert.Equal(t, "/"+pgEnv["POSTGRES_DB"], u.Path)
		assert.Equal(t, pgEnv["POSTGRES_USER"], u.User.Username())
		password, _ := u.User.Password()
		assert.Equal(t, pgEnv["POSTGRES_PASSWORD"], password)
		assert.Equal(t, models.Postgres, models.BackendOf(env["DATABASE_URL"]))
		assert.Equal(t, "8", env["DB_POOL"])
		assert.Equal(t, "redis://redis:6379/0", env["REDIS_URL"])
		assert.Equal(t, ":8080", env["ADDR"])
		assert.Equal(t, "compose-test-token", env["ADMIN_TOKEN"])
		assert.Equal(t, "lock+guard", env["STRATEGY"])
		assert.Equal(t, "false", env["DEMO"])
		// Every value must be one the server accepts.
		_, err = parseConfig(nil, func(k string) string { return env[k] }, &strings.Builder{})
		assert.NoError(t, err, "%s: environment rejected by stockguard", name)
		if firstEnv == nil {
			firstEnv = env
		} else {
			assert.Equal(t, firstEnv, env, "the replicas are configured alike")
		}
	}

	nginx, err := p.GetService("nginx")
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(nginx.Image, "nginx:"), nginx.Image)
	require.Len(t, nginx.Ports, 1)
	assert.Equal(t, uint32(80), nginx.Ports[0].Target)
	assert.Equal(t, "8080", nginx.Ports[0].Published)
	assertHealthCheck(t, nginx, "/healthz")
	for _, name := range storefronts {
		require.Contains(t, nginx.DependsOn, name)
		assert.Equal(t, types.ServiceConditionHealthy, nginx.DependsOn[name].Condition)
	}
	require.Len(t, nginx.Volumes, 1)
	assert.Equal(t, "/etc/nginx/nginx.conf", nginx.Volumes[0].Target)
	assert.True(t, nginx.Volumes[0].ReadOnly)
	assert.FileExists(t, nginx.Volumes[0].Source)
}

func TestComposeNeedsAdminToken(t *testing.T) {
	opts, err := cli.NewProjectOptions([]string{"docker-compose.yml"}, cli.WithWorkingDirectory("."), cli.WithEnv(nil))
	require.NoError(t, err)
	_, err = opts.LoadProject(context.Background())
	require.Error(t, err, "without ADMIN_TOKEN the replicas would each generate their own")
	assert.Contains(t, err.Error(), "ADMIN_TOKEN")

	p := loadCompose(t, "ADMIN_TOKEN=x", "DEMO=true", "PORT=9090", "POSTGRES_PASSWORD=s3cret")
	s, err := p.GetService("storefront-2")
	require.NoError(t, err)
	assert.Equal(t, "true", *s.Environment["DEMO"])
	assert.Contains(t, *s.Environment["DATABASE_URL"], "stockguard:s3cret@postgres:5432")
	pg, err := p.GetService("postgres")
	require.NoError(t, err)
	assert.Equal(t, "s3cret", *pg.Environment["POSTGRES_PASSWORD"])
	n, err := p.GetService("nginx")
	require.NoError(t, err)
	assert.Equal(t, "9090", n.Ports[0].Published)
}

func assertHealthCheck(t *testing.T, s types.ServiceConfig, want string) {
	t.Helper()
	require.NotNil(t, s.HealthCheck, "%s has a health check", s.Name)
	assert.False(t, s.HealthCheck.Disable)
	assert.Contains(t, strings.Join(s.HealthCheck.Test, " "), want, s.Name)
	require.NotNil(t, s.HealthCheck.Interval, s.Name)
	require.NotNil(t, s.HealthCheck.Timeout, s.Name)
}

// tracingEnv are the OpenTelemetry variables the storefront reads (internal/tracing).
var tracingEnv = []string{tracing.EnvEndpoint, tracing.EnvServiceName, tracing.EnvSampler}

// The profile "tracing" adds Jaeger, which the replicas export to once
// OTEL_EXPORTER_OTLP_ENDPOINT names it; without the endpoint tracing stays off.
func TestComposeTracingProfile(t *testing.T) {
	p := loadCompose(t, "ADMIN_TOKEN=compose-test-token")
	assert.NotContains(t, p.ServiceNames(), "jaeger", "Jaeger runs only with the tracing profile")
	s, err := p.GetService(storefronts[0])
	require.NoError(t, err)
	require.NotNil(t, s.Environment[tracing.EnvEndpoint])
	assert.Empty(t, *s.Environment[tracing.EnvEndpoint], "tracing is off by default")

	opts, err := cli.NewProjectOptions([]string{"docker-compose.yml"}, cli.WithWorkingDirectory("."),
		cli.WithEnv([]string{"ADMIN_TOKEN=compose-test-token", "OTEL_EXPORTER_OTLP_ENDPOINT=http://jaeger:4318"}),
		cli.WithInterpolation(true), cli.WithResolvedPaths(false), cli.WithProfiles([]string{"tracing"}))
	require.NoError(t, err)
	p, err = opts.LoadProject(context.Background())
	require.NoError(t, err)
	j, err := p.GetService("jaeger")
	require.NoError(t, err)
	assert.Equal(t, "jaegertracing/jaeger:2.13.0", j.Image, "the release of the v1.76.0 that tools/jaeger builds")
	assert.Contains(t, []string(j.Expose), "4318", "OTLP over HTTP")
	require.Len(t, j.Ports, 1)
	assert.Equal(t, uint32(16686), j.Ports[0].Target, "the UI and /api/traces")
	for _, name := range storefronts {
		s, err := p.GetService(name)
		require.NoError(t, err)
		env := func(k string) string {
			if v := s.Environment[k]; v != nil {
				return *v
			}
			return ""
		}
		assert.Equal(t, "http://jaeger:4318", env(tracing.EnvEndpoint), name)
		tr, err := tracing.FromEnv(env)
		require.NoError(t, err, "%s: tracing environment rejected", name)
		require.NotNil(t, tr, "%s: tracing on", name)
		assert.Equal(t, "stockguard", tr.Service())
		require.NoError(t, tr.Close())
	}
	b, err := os.ReadFile("tools/jaeger/go.mod")
	require.NoError(t, err)
	assert.Contains(t, string(b), "github.com/jaegertracing/jaeger v1.76.0", "tools/jaeger builds the version compose runs")
}

func knownEnv(name string) bool {
	for _, e := range envOf {
		if e == name {
			return true
		}
	}
	return false
}

func TestNginxConfigMatchesCompose(t *testing.T) {
	b, err := os.ReadFile("deploy/nginx.conf")
	require.NoError(t, err)
	conf := string(b)
	// Two upstream groups over the same replicas: purchases by item, the rest spread.
	upstreams := regexp.MustCompile(`(?ms)^\s*upstream\s+(\w+)\s*\{(.*?)\}`).FindAllStringSubmatch(conf, -1)
	require.Len(t, upstreams, 2)
	for _, u := range upstreams {
		servers := regexp.MustCompile(`(?m)^\s*server\s+([\w.-]+):(\d+)`).FindAllStringSubmatch(u[2], -1)
		require.Len(t, servers, len(storefronts), "upstream %s", u[1])
		for i, m := range servers {
			assert.Equal(t, storefronts[i], m[1], "upstream %s", u[1])
			assert.Equal(t, "8080", m[2], "upstream %s", u[1])
		}
	}
	assert.Regexp(t, `(?m)^\s*hash \$item_id consistent;`, upstreams[1][2], "purchases: one replica per item")
	assert.Regexp(t, `(?m)^\s*location ~ \^/api/items/0\*\(\?<item_id>\[0-9\]\+\)/purchase\$ \{\s*proxy_pass http://`+upstreams[1][1]+`;`, conf)
	assert.Regexp(t, `(?m)^\s*location / \{\s*proxy_pass http://`+upstreams[0][1]+`;`, conf)
	assert.Regexp(t, `(?m)^\s*listen 80;`, conf)
	assert.Contains(t, conf, "proxy_set_header X-Request-ID")
	assert.NotContains(t, conf, "non_idempotent", "a purchase must never be retried on another replica")
	assert.Equal(t, strings.Count(conf, "{"), strings.Count(conf, "}"), "balanced braces")
}

func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("Dockerfile")
	require.NoError(t, err)
	df := string(b)
	froms := regexp.MustCompile(`(?m)^FROM\s+(\S+)`).FindAllStringSubmatch(df, -1)
	require.Len(t, froms, 2, "multi-stage: build, then runtime")
	assert.True(t, strings.HasPrefix(froms[0][1], "golang:1.26"), froms[0][1])
	assert.Contains(t, df, "CGO_ENABLED=1", "mattn/go-sqlite3 needs cgo")
	assert.Contains(t, df, "COPY --from=build")
	assert.Regexp(t, `(?m)^USER\s+\S+`, df, "runs as a non-root user")
	assert.Regexp(t, `(?m)^HEALTHCHECK`, df)
	assert.Regexp(t, `(?m)^EXPOSE\s+8080`, df)
	// The runtime image has the curl the compose health checks call.
	assert.Contains(t, df, "curl")
}
