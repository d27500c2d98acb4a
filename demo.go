//go:build !nodemo

package main

// The demo: the lock lab (package lab) and the demo strategies' broken locks (package
// pitfalls, through lab). This file is the command's only tie to them: delete it, or build
// with -tags nodemo, and the storefront builds and serves without them.

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/handlers"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/lab"
)

func init() {
	demo.storefront = labStorefront
	demo.supervise = labSupervise
	demo.strategies = lab.Strategies
}

// supervisorExecutable is the program the lab's supervisor starts as its instances (in tests
// it is the test binary, which runs as the storefront, see TestMain).
var supervisorExecutable = os.Executable

// labStorefront is the lab in one --demo storefront process.
func labStorefront(ctx context.Context, cfg config, rdb redis.UniversalClient) demoStorefront {
	return storefrontLab{lab.NewStorefront(ctx, lab.StorefrontConfig{
		Redis: rdb, Lease: cfg.lockLease, LockWait: cfg.lockWait, StallFor: cfg.stallFor(), Strategy: cfg.strategy,
		RequireToken: cfg.exposed()})}
}

// storefrontLab gives the lab's reset the inventory service.
type storefrontLab struct{ *lab.Storefront }

func (s storefrontLab) Handlers(hcfg *handlers.Config, svc *inventory.Service) {
	s.Storefront.Handlers(hcfg, svc)
}

// labSupervise returns the serve function of --demo --instances N: this process serves the
// lab and starts N storefront children on free loopback ports, sharing its database, its
// Redis and its admin token (a SQLite file, or the --db PostgreSQL URL; the token in their
// environment, not on their command line). Children's log lines go to stderr, prefixed with
// their index.
func labSupervise(stderr io.Writer) serveFunc {
	return func(ctx context.Context, cfg config, getenv func(string) string, logger *slog.Logger) error {
		rb, err := openRedis(ctx, cfg.redisURLList(), cfg.redisCluster, getenv, logger, nil) // no breakers: the lab's own calls
		if err != nil {
			return err
		}
		defer rb.close()
		redisURL := strings.Join(cfg.redisURLList(), ",")
		if c, ok := rb.client.(*redis.Client); ok && redisURL == "" { // a Redis started here
			redisURL = "redis://" + c.Options().Addr + "/0"
		}
		exe, err := supervisorExecutable()
		if err != nil {
			return err
		}
		args, env, err := instanceArgs(cfg, redisURL)
		if err != nil {
			return err
		}
		token := cfg.adminToken
		if token == "" {
			token = randomToken()
			notice(logger, "no --admin-token or ADMIN_TOKEN: generated one for this run (every instance uses it)", "admin_token", token)
		}
		sup := lab.NewSupervisor(lab.SupervisorConfig{
			Executable: exe, Args: args, Instances: cfg.instances, Redis: rb.client,
			// The token and the URLs go through the environment: a command line is anyone's
			// to read (ps).
			Env:        append(env, envOf["admin-token"]+"="+token, labInstanceEnv+"=1"),
			AdminToken: token, RequireToken: cfg.exposed(),
			Lease: cfg.lockLease, LockWait: cfg.lockWait, PauseFor: cfg.stallFor(), Output: stderr, Logger: logger,
			Notice: func(msg string, args ...any) { notice(logger, msg, args...) },
		})
		defer sup.Stop(cfg.shutdownTimeout + 5*time.Second)

		sctx, cancel := context.WithCancelCause(ctx) // cancelled too by an instance that exits
		defer cancel(nil)
		if err := sup.Start(sctx, cancel); err != nil {
			return err
		}
		notice(logger, "lab supervisor", "instances", cfg.instances, "pause_for", cfg.stallFor())
		if err := listenAndServe(sctx, cfg, sup.Handler(), logger); err != nil {
			return err
		}
		if ctx.Err() == nil { // not a shutdown: an instance exited right after its start, or could not start again
			return context.Cause(sctx)
		}
		return nil
	}
}

// instanceArgs are the flags of every lab instance: a --demo storefront on a free loopback
// port with the supervisor's settings; and its environment: the database (a SQLite path made
// absolute) and Redis, whose URLs may carry passwords, so they go through the environment as
// the admin token does (labSupervise), never on a command line, which anyone can read (ps).
func instanceArgs(cfg config, redisURL string) (args, env []string, err error) {
	db := cfg.db
	if !strings.HasPrefix(db, "file:") && !strings.Contains(db, "://") { // a SQLite path
		if db, err = filepath.Abs(db); err != nil {
			return nil, nil, err
		}
	}
	env = []string{envOf["db"] + "=" + db, envOf["redis"] + "=" + redisURL}
	return []string{"--demo", "--instances", "0", "--addr", "127.0.0.1:0",
		"--strategy", cfg.strategy, "--lock-lease", cfg.lockLease.String(),
		"--lock-wait", cfg.lockWait.String(), "--max-inflight-per-item", strconv.Itoa(cfg.maxInflight),
		"--db-pool", strconv.Itoa(cfg.dbPool), "--db-statement-timeout", cfg.dbStmtTimeout.String(),
		"--log-level", cfg.logLevel.String(), "--shutdown-timeout", cfg.shutdownTimeout.String(),
		"--redis-cluster=" + strconv.FormatBool(cfg.redisCluster), "--on-redis-down", cfg.onRedisDown,
		"--lock-replicas", strconv.Itoa(cfg.lockReplicas), "--redis-call-timeout", cfg.redisCall.String(),
		"--max-batch", strconv.Itoa(cfg.maxBatch), "--stream-hold", cfg.streamHold.String(),
		"--stream-alone=" + strconv.FormatBool(cfg.streamAlone), "--max-purchases", strconv.Itoa(cfg.maxPurchases),
		"--hold-ttl", cfg.holdTTL.String()}, env, nil
}

// notForwarded are the flags a lab instance does not take from its supervisor: its own address
// and role (--addr, --demo, --instances), and the admin token, which goes through the
// environment (labSupervise).
var notForwarded = map[string]bool{"addr": true, "demo": true, "instances": true, "admin-token": true}
