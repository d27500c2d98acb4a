// Package handlers is the HTTP face of the storefront: a Gin engine that parses requests,
// calls the inventory service and renders its answers, and maps every error to one status
// code and the JSON error shape of docs/DESIGN.md §11. It knows nothing of SQL or Redis.
//
// Routes:
//
//	GET  /api/items                  the catalogue
//	GET  /api/items/:id              one item (404 not_found)
//	POST /api/items/:id/purchase     {"quantity":N}: 201 new order, 200 idempotent replay
//	GET  /api/orders                 ?item_id=&after_id=&limit= (ascending by id), each with its lines
//	GET  /api/stats                  sales per item, with held_units and oversold_units
//	POST /api/checkout               {"lines":[{"item_id":N,"quantity":N},...]}: a cart, all or nothing
//	POST /api/holds, GET|DELETE /api/holds/:id, POST /api/holds/:id/confirm   stock holds (checkout.go)
//	POST /api/admin/reset            Authorization: Bearer <token>; {"items":[...]}
//	GET  /api/debug/locks            --demo only: the item locks this process holds
//	GET  /api/strategies             the strategies offered, with description and safety
//	GET  /, /static/*                the shop page (or the page of Config.Pages)
//	GET  /debug/pprof/...            --demo only: Go's profiles (net/http/pprof); the admin
//	                                 token too with Config.ProfilesNeedAdmin
//	GET  /healthz, /readyz, /metrics
//	GET  /openapi.json               the OpenAPI document of the routes above that are not
//	                                 --demo only (openapi.go)
//
// An extension (the lock lab of package lab) adds its own routes through Config.Extend, its
// page through Config.Pages, and acts on single purchases through Config.Intercept; the
// storefront itself knows nothing of it.
//
// A path id must be a positive decimal integer: anything else is 400 invalid_request, so 404
// always means a well-formed id that names no item. Every error, unknown routes (404) and
// wrong methods (405) included, is {"error":{"code":"...","message":"..."}}; classify is the
// one place that maps errors to status codes.
package handlers

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/inventory"
)

// Body size limits.
const (
	MaxBodyBytes      = 8 << 10 // every request body, except the admin reset
	MaxResetBodyBytes = 1 << 20 // the admin reset body (a whole catalogue)
)

// readyTimeout bounds the readiness check of /readyz.
const readyTimeout = 2 * time.Second

// Service is what the handlers need of the inventory service (*inventory.Service has these
// methods). Tests may wrap a real service to inject failures.
type Service interface {
	Purchase(ctx context.Context, req inventory.PurchaseRequest) (inventory.Receipt, error)
	ListItems(ctx context.Context) ([]inventory.Item, error)
	GetItem(ctx context.Context, id int64) (inventory.Item, error)
	ListOrders(ctx context.Context, q inventory.OrderQuery) ([]inventory.Order, error)
	Stats(ctx context.Context) ([]inventory.ItemStats, error)
	Reset(ctx context.Context, items []inventory.NewItem) error
	Readiness(ctx context.Context) ([]inventory.CheckResult, error)
	Strategies() []string
	DescribeStrategies() []inventory.StrategyInfo
	Carts
}

// Config configures New.
type Config struct {
	Service Service
	// AdminToken is the bearer token of the admin routes; "" refuses every admin request.
	AdminToken string
	// Demo accepts the demo headers (DemoHeaders: X-Strategy and X-Simulated-Work, read here;
	// X-Fault and X-Barrier, left to Intercept and Extend) and serves /api/debug/locks.
	// Without it a purchase, checkout or hold placement that sends any of them is 400.
	Demo bool
	// DefaultStrategy labels the metrics of purchases that name no strategy; "" means
	// inventory.StrategyLockGuard.
	DefaultStrategy string
	// Logger receives the access log and error details; nil means slog.Default().
	Logger *slog.Logger
	// Metrics, when not nil, is updated by purchases and served on /metrics; without it
	// /metrics answers 404.
	Metrics *Metrics
	// Debug lists the locks held by this process for /api/debug/locks (demo mode only);
	// nil answers an empty list.
	Debug DebugSource
	// Intercept, when not nil, is asked about every purchase request once it is parsed: it
	// returns the inventory.Interceptor the purchase runs through (nil: none), or an error,
	// answered as it classifies (an inventory.ErrInvalid one is 400 invalid_request). The
	// lab builds its faults from a request header this way.
	Intercept func(*http.Request) (inventory.Interceptor, error)
	// Extend, when not nil, adds routes to the engine after the storefront's own (an
	// extension's API). Its handlers answer errors with WriteError.
	Extend func(*gin.Engine)
	// Pages, when not nil, replaces the shop page at / (its files are served under /static/
	// ahead of the shop's own).
	Pages *Pages
	// MaxPurchases bounds the purchases in flight in this process, checkouts, hold
	// placements and hold confirmations included; past it such a request is answered 503
	// at_capacity with Retry-After at once (shed.go). 0: no bound.
	MaxPurchases int
	// ProfilesNeedAdmin makes /debug/pprof/ (demo mode) take the admin token, as the admin
	// routes do: set it when a demo server listens beyond loopback.
	ProfilesNeedAdmin bool
	// Trace, when not nil, is the tracing middleware (otelgin's, from the command's tracing
	// setup): it runs first, so that the request's span is in the context of everything
	// after it, the access log line and the purchase included. nil: no tracing.
	Trace gin.HandlerFunc
}

// ginSetup sets Gin's process-wide settings once: release mode, no debug output.
var ginSetup sync.Once

// server holds the configuration the route handlers share.
type server struct {
	svc             Service
	adminToken      string
	demo            bool
	defaultStrategy string
	metrics         *Metrics
	debug           DebugSource
	offered         map[string]bool // the service's strategies
	intercept       func(*http.Request) (inventory.Interceptor, error)
	extend          func(*gin.Engine)
	pages           *Pages
	bound           gin.HandlerFunc // purchases, checkouts, hold placements and confirmations in flight (shed.go)
	profilesAdmin   bool
	trace           gin.HandlerFunc // Config.Trace; nil: none
}

// New returns the storefront's HTTP handler: a Gin engine in release mode with the routes of
// docs/DESIGN.md §10.1, request id, access log and panic recovery middleware, and JSON answers for
// unknown routes (404) and wrong methods (405).
func New(cfg Config) http.Handler {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	s := &server{
		svc:             cfg.Service,
		adminToken:      cfg.AdminToken,
		demo:            cfg.Demo,
		defaultStrategy: cfg.DefaultStrategy,
		metrics:         cfg.Metrics,
		debug:           cfg.Debug,
		offered:         make(map[string]bool),
		intercept:       cfg.Intercept,
		extend:          cfg.Extend,
		pages:           cfg.Pages,
		bound:           purchaseBound(cfg.MaxPurchases),
		profilesAdmin:   cfg.ProfilesNeedAdmin,
		trace:           cfg.Trace,
	}
	for _, name := range cfg.Service.Strategies() {
		s.offered[name] = true
	}
	if s.defaultStrategy == "" {
		s.defaultStrategy = inventory.StrategyLockGuard
	}
	if s.metrics != nil {
		s.metrics.watchStock(cfg.Service)
	}
	return s.engine(logger)
}

func (s *server) engine(logger *slog.Logger) *gin.Engine {
	r := newEngine(logger, s.trace)
	small := limitBody(MaxBodyBytes)
	r.GET("/healthz", small, s.healthz)
	r.GET("/readyz", small, s.readyz)
	r.GET("/metrics", small, s.serveMetrics)
	r.GET("/openapi.json", small, serveOpenAPI) // openapi.go

	api := r.Group("/api")
	api.GET("/items", small, s.listItems)
	api.GET("/items/:id", small, s.getItem)
	api.POST("/items/:id/purchase", s.bound, small, s.purchase)
	api.GET("/orders", small, s.listOrders)
	api.GET("/stats", small, s.stats)
	api.POST("/admin/reset", limitBody(MaxResetBodyBytes), s.requireAdmin, s.reset)
	api.GET("/debug/locks", small, s.debugLocks)
	api.GET("/strategies", small, s.strategies)
	s.cartRoutes(api, small) // checkout.go
	if s.demo {              // Go's profiles of the purchase path under load
		chain := []gin.HandlerFunc{small}
		if s.profilesAdmin {
			chain = append(chain, s.requireAdmin)
		} else {
			// On loopback, no token: but no page of another site either (its command line
			// and heap are this process's; DNS rebinding could read them otherwise).
			chain = append(chain, LocalOnly())
		}
		r.GET("/debug/pprof/*name", append(chain, gin.WrapF(servePprof))...)
	}
	if s.extend != nil {
		s.extend(r)
	}
	ServePages(r, s.pages)
	return r
}

// NewEngine returns a Gin engine in release mode with the storefront's middleware (request
// id, access log, panic recovery) and its JSON 404 and 405 answers: the base of New's engine,
// and of another process's that serves next to storefronts (the lab's supervisor).
func NewEngine(logger *slog.Logger) *gin.Engine { return newEngine(logger, nil) }

// newEngine is NewEngine with trace (when not nil) as the first middleware.
func newEngine(logger *slog.Logger, trace gin.HandlerFunc) *gin.Engine {
	if logger == nil {
		logger = slog.Default()
	}
	ginSetup.Do(func() {
		gin.SetMode(gin.ReleaseMode)
		gin.DefaultWriter, gin.DefaultErrorWriter = io.Discard, io.Discard
	})
	r := gin.New()
	r.HandleMethodNotAllowed = true
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	r.ContextWithFallback = true
	if trace != nil {
		r.Use(trace)
	}
	r.Use(requestID(logger), accessLog(), recovery())
	r.NoRoute(func(c *gin.Context) { writeError(c, errRouteNotFound) })
	r.NoMethod(func(c *gin.Context) { writeError(c, errMethodNotAllowed) })
	return r
}

func (s *server) healthz(c *gin.Context) {
	c.JSON(http.StatusOK, gin.H{"status": "ok"})
}

func (s *server) readyz(c *gin.Context) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), readyTimeout)
	defer cancel()
	checks, err := s.svc.Readiness(ctx)
	if err != nil {
		writeError(c, unavailable(err)) // the error names the failed checks: logged, not shown
		return
	}
	c.JSON(http.StatusOK, gin.H{"status": "ok", "checks": checks})
}

func (s *server) serveMetrics(c *gin.Context) {
	if s.metrics == nil {
		writeError(c, errRouteNotFound)
		return
	}
	s.metrics.ServeHTTP(c.Writer, c.Request)
}
