//go:build !nodemo

// Package lab is stockguard's lock lab: a page that fires bursts of buyers at one item across
// storefront instances and draws their locks, leases and fences from each instance's event
// stream, with faults to inject (a stalled holder, a SIGSTOPped holder, a holder killed with
// SIGKILL, a holder that dies between SETNX and EXPIRE).
//
// It plugs into the storefront from outside: Storefront adds the event hub, the faults and
// the demo strategies' locks to one --demo storefront process (through inventory's and
// handlers' extension points), and Supervisor is the process of --demo --instances N that
// starts N storefront processes and serves the lab over them. The storefront builds and runs
// without this package (the command's nodemo build tag).
//
// Routes it adds:
//
//	GET  /, /static/*                the lab page (lab.html, lab.js; style.css is the shop's)
//	GET  /api/events                 server-sent lock and purchase events of this process
//	GET  /api/lab                    the instances, the lease, and whether Pause is offered
//	POST /api/lab/run                a burst of buyers with a fault, and its verdict
//	POST /api/lab/carts              a cart pitfall or its fix (two crossed carts, or one cart
//	                                 of two lines of one item), and its verdict
//	POST /api/lab/checkout           a cart of a demo cart strategy, with the barrier fault
//	                                 (one storefront process; carts.go)
//	POST /api/lab/pause              SIGSTOP an item's lock holder (supervisor only)
//	POST /api/lab/kill               SIGKILL an item's lock holder, started again (supervisor only)
//	POST /api/lab/lease              start the instances again with another lease (supervisor only)
//	POST /api/lab/takeover           the kill lesson: lock+guard and lock side by side, each
//	                                 item's holder killed at once (supervisor only)
//	POST /api/lab/reset              the lab catalogue (one storefront process)
//	ANY  /i/:index/*path             instance index's API (supervisor only)
//	GET  /readyz                     every instance's own /readyz (supervisor only; a
//	                                 storefront process answers its own)
//
// Run, carts, pause, kill, lease, takeover and reset, and an instance's lab POSTs and profiles under /i/, take the
// admin token when the demo listens beyond loopback (StorefrontConfig.RequireToken,
// SupervisorConfig.RequireToken); on loopback they take none. A process's own
// /api/lab/checkout sells, as a purchase does: it takes no token.
package lab

import (
	"context"
	"embed"
	"io/fs"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/handlers"
	"github.com/stockguard/stockguard/inventory"
)

// web holds the lab page (lab.html) and its script; the style sheet is the shop's
// (handlers.Pages serves the two together). Plain files, no build step.
//
//go:embed web
var web embed.FS

// pages is the lab page, for handlers.Config.Pages and the supervisor.
func pages() *handlers.Pages {
	sub, _ := fs.Sub(web, "web") // the directory is embedded: Sub cannot fail
	return &handlers.Pages{FS: sub, Index: "lab.html"}
}

// Instance is one storefront process of the lab.
type Instance struct {
	Index int    `json:"index"`
	PID   int    `json:"pid"`
	Base  string `json:"base"` // prefix of its API on the page's origin ("" for the page's own process)
	URL   string `json:"-"`    // its base URL, for the lab's own requests
}

// Paused is a lock holder the supervisor stopped.
type Paused struct {
	Instance int     `json:"instance"`
	PID      int     `json:"pid"`
	Token    int64   `json:"token"`
	AtMS     float64 `json:"at_ms"`  // when SIGSTOP was sent, Unix ms
	ForMS    float64 `json:"for_ms"` // SIGCONT follows after this long
}

// Errors of the lab's API.
var (
	// ErrNotHeld: the lab was asked to pause the holder of an item's lock, and no instance
	// holds it (Supervisor.Pause returns it wrapped).
	ErrNotHeld = &handlers.Error{Status: http.StatusConflict, Code: "not_held",
		Message: "no instance holds the item's lock"}
	errPauseUnsupported = &handlers.Error{Status: http.StatusConflict, Code: "pause_unsupported",
		Message: "pausing a lock holder needs --instances N: a process holding a lock cannot resume itself, so the supervisor sends the signals"}
	errKillUnsupported = &handlers.Error{Status: http.StatusConflict, Code: "kill_unsupported",
		Message: "killing a lock holder needs --instances N: the supervisor kills the holder and starts it again"}
	errLeaseUnsupported = &handlers.Error{Status: http.StatusConflict, Code: "lease_unsupported",
		Message: "changing the lab's lease needs --instances N: a storefront takes its lease at start, so the supervisor starts its instances again with the new one"}
)

// Catalogue is what the lab needs of the inventory service (*inventory.Service): the lab
// catalogue's reset, and the demo carts' checkout.
type Catalogue interface {
	Reset(ctx context.Context, items []inventory.NewItem) error
	ListItems(ctx context.Context) ([]inventory.Item, error)
	Carts
}

// api serves the lab's API for one demo process, or for a supervisor.
type api struct {
	sup   *Supervisor // nil: the lab is this one process
	lease time.Duration
	cat   Catalogue // nil in the supervisor (reset goes to an instance)
	hc    *http.Client
	// guard, when not nil, stands before the lab's mutating routes (run, carts, pause, reset) and,
	// in the supervisor, before the instances' lab routes and profiles: the admin token's
	// check, for a demo that listens beyond loopback. Without it (loopback), local stands
	// there instead: handlers.LocalOnly, so that another web page cannot act on the demo.
	guard gin.HandlerFunc
	local gin.HandlerFunc
}

// guardFor returns the admin token check of the lab's mutating routes when required, else nil.
func guardFor(required bool, token string) gin.HandlerFunc {
	if !required {
		return nil
	}
	return handlers.RequireAdmin(token)
}

// check is what stands before a route that acts: the token's check, or LocalOnly's.
func (l *api) check() gin.HandlerFunc {
	if l.guard != nil {
		return l.guard
	}
	return l.local
}

// labInfo is the answer of GET /api/lab.
type labInfo struct {
	Instances []Instance `json:"instances"`
	LeaseMS   float64    `json:"lease_ms"` // the instances' lease now
	// StartLeaseMS is the lease the lab was started with (the page's default).
	StartLeaseMS float64 `json:"start_lease_ms"`
	// PitfallLeaseMS is the fixed lease of the pitfall locks (PitfallLease).
	PitfallLeaseMS float64 `json:"pitfall_lease_ms"`
	// Pause holder is offered (and kill -9, and the lease: all need the supervisor); why not,
	// when it is not.
	Pause     bool   `json:"pause"`
	PauseNote string `json:"pause_note"`
	// TokenRequired: the lab's routes that act (run, carts, pause, kill, lease, takeover,
	// reset) need "Authorization: Bearer <admin token>" (a demo that listens beyond loopback).
	TokenRequired bool `json:"token_required"`
}

// labCatalogue is what the lab's Reset loads: three items of ten units, so that a burst of
// twenty buyers sells one out and an oversell shows at once.
var labCatalogue = []inventory.NewItem{
	{SKU: "LAB-HOODIE", Name: "Limited hoodie", Stock: 10, PriceCents: 4999},
	{SKU: "LAB-TICKET", Name: "Concert ticket", Stock: 10, PriceCents: 7500},
	{SKU: "LAB-SNEAKER", Name: "Sneaker drop", Stock: 10, PriceCents: 12000},
}

// routes adds the lab's API.
func (l *api) routes(r gin.IRoutes) {
	small := handlers.LimitBody(handlers.MaxBodyBytes)
	guarded := func(h gin.HandlerFunc) []gin.HandlerFunc {
		return []gin.HandlerFunc{small, l.check(), h}
	}
	r.GET("/api/lab", small, l.info)
	r.POST("/api/lab/run", guarded(l.run)...)
	r.POST("/api/lab/carts", guarded(l.carts)...)
	r.POST("/api/lab/pause", guarded(l.pause)...)
	r.POST("/api/lab/kill", guarded(l.kill)...)
	r.POST("/api/lab/lease", guarded(l.setLease)...)
	r.POST("/api/lab/takeover", guarded(l.takeover)...)
	if l.cat != nil {
		r.POST("/api/lab/reset", guarded(l.reset)...)
	}
}

// instances lists the lab's instances: the supervisor's, or this process, reached at the
// local address the request came in on.
func (l *api) instances(c *gin.Context) []Instance {
	if l.sup != nil {
		return l.sup.Instances()
	}
	self := Instance{PID: os.Getpid()}
	if addr, ok := c.Request.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		self.URL = "http://" + addr.String()
	}
	return []Instance{self}
}

func (l *api) info(c *gin.Context) {
	lease := l.lease
	if l.sup != nil {
		lease = l.sup.Lease()
	}
	info := labInfo{Instances: l.instances(c), LeaseMS: ms(lease), StartLeaseMS: ms(l.lease), PitfallLeaseMS: ms(PitfallLease(lease)),
		Pause: l.sup != nil, TokenRequired: l.guard != nil}
	if l.sup == nil {
		info.PauseNote = errPauseUnsupported.Error()
	}
	c.JSON(http.StatusOK, info)
}

// reset answers POST /api/lab/reset in one demo process: the lab catalogue replaces the
// catalogue. No admin token on loopback (a demo server is for learning on one's own machine,
// never for a shop); beyond loopback the guard asks for it.
func (l *api) reset(c *gin.Context) {
	if err := l.cat.Reset(c.Request.Context(), labCatalogue); err != nil {
		handlers.WriteError(c, err)
		return
	}
	items, err := l.cat.ListItems(c.Request.Context())
	if err != nil {
		handlers.WriteError(c, err)
		return
	}
	c.JSON(http.StatusOK, handlers.ItemViews(items))
}

// itemOfBody decodes a body {"item":N} of a positive item id (pause, kill), or answers the
// error and returns false.
func itemOfBody(c *gin.Context) (int64, bool) {
	var body struct {
		Item int64 `json:"item"`
	}
	if err := handlers.DecodeJSON(c.Request.Body, &body); err != nil {
		handlers.WriteError(c, err)
		return 0, false
	}
	if body.Item < 1 {
		handlers.WriteError(c, invalidField("item", "a positive item id", body.Item))
		return 0, false
	}
	return body.Item, true
}

// pause answers POST /api/lab/pause {"item":N}.
func (l *api) pause(c *gin.Context) {
	item, ok := itemOfBody(c)
	if !ok {
		return
	}
	if l.sup == nil {
		handlers.WriteError(c, errPauseUnsupported)
		return
	}
	p, err := l.sup.Pause(c.Request.Context(), item)
	if err != nil {
		handlers.WriteError(c, err)
		return
	}
	c.JSON(http.StatusOK, p)
}
