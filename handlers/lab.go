package handlers

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/inventory"
)

// web holds the pages: the lab (lab.html, --demo) and the shop (shop.html), with one style
// sheet and one script each. Plain files, no build step.
//
//go:embed web
var web embed.FS

// LabInstance is one storefront process of the lab.
type LabInstance struct {
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
	ForMS    float64 `json:"for_ms"` // SIGCONT follows after this long
}

// Supervisor is the process that started the lab's instances (--instances N): it lists them
// and is the one that sends signals, since a process holding a lock cannot resume itself.
type Supervisor interface {
	Instances() []LabInstance
	// Pause stops (SIGSTOP) the instance holding item's lock and continues it (SIGCONT) after
	// three leases. It fails with an error wrapping ErrNotHeld when no instance holds it.
	Pause(ctx context.Context, itemID int64) (Paused, error)
}

// lab serves the lab page and its API for one demo process, or for a supervisor.
type lab struct {
	sup   Supervisor // nil: the lab is this one process
	lease time.Duration
	svc   Service // nil in the supervisor (reset goes to an instance)
	hc    *http.Client
}

// labInfo is the answer of GET /api/lab.
type labInfo struct {
	Instances []LabInstance `json:"instances"`
	LeaseMS   float64       `json:"lease_ms"`
	Pause     bool          `json:"pause"`      // Pause holder is offered
	PauseNote string        `json:"pause_note"` // why not, when it is not
}

// labCatalogue is what the lab's Reset loads: three items of ten units, so that a burst of
// twenty buyers sells one out and an oversell shows at once.
var labCatalogue = []inventory.NewItem{
	{SKU: "LAB-HOODIE", Name: "Limited hoodie", Stock: 10, PriceCents: 4999},
	{SKU: "LAB-TICKET", Name: "Concert ticket", Stock: 10, PriceCents: 7500},
	{SKU: "LAB-SNEAKER", Name: "Sneaker drop", Stock: 10, PriceCents: 12000},
}

// pageRoutes adds GET / (the lab in demo mode, else the shop) and the static files.
func pageRoutes(r *gin.Engine, demo bool) {
	static, _ := fs.Sub(web, "web") // the directory is embedded: Sub cannot fail
	page := "shop.html"
	if demo {
		page = "lab.html"
	}
	r.GET("/", func(c *gin.Context) {
		c.Header("Cache-Control", "no-cache")
		c.FileFromFS(page, http.FS(static))
	})
	files := http.StripPrefix("/static/", http.FileServerFS(static))
	r.GET("/static/*file", func(c *gin.Context) {
		c.Header("Cache-Control", "no-cache")
		files.ServeHTTP(c.Writer, c.Request)
	})
}

// labRoutes adds the lab's API.
func (l *lab) routes(api *gin.RouterGroup) {
	small := limitBody(MaxBodyBytes)
	api.GET("/lab", small, l.info)
	api.POST("/lab/run", small, l.run)
	api.POST("/lab/pause", small, l.pause)
	if l.svc != nil {
		api.POST("/lab/reset", small, l.reset)
	}
}

// instances lists the lab's instances: the supervisor's, or this process, reached at the
// local address the request came in on.
func (l *lab) instances(c *gin.Context) []LabInstance {
	if l.sup != nil {
		return l.sup.Instances()
	}
	self := LabInstance{PID: os.Getpid()}
	if addr, ok := c.Request.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		self.URL = "http://" + addr.String()
	}
	return []LabInstance{self}
}

func (l *lab) info(c *gin.Context) {
	info := labInfo{Instances: l.instances(c), LeaseMS: ms(l.lease), Pause: l.sup != nil}
	if l.sup == nil {
		info.PauseNote = errPauseUnsupported.Error()
	}
	c.JSON(http.StatusOK, info)
}

// reset answers POST /api/lab/reset in demo mode: the lab catalogue replaces the catalogue.
// Demo mode only, so no admin token: a demo server is for learning, never for a shop.
func (l *lab) reset(c *gin.Context) {
	if err := l.svc.Reset(c.Request.Context(), labCatalogue); err != nil {
		writeError(c, err)
		return
	}
	items, err := l.svc.ListItems(c.Request.Context())
	if err != nil {
		writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, newItemViews(items))
}

// pause answers POST /api/lab/pause {"item":N}.
func (l *lab) pause(c *gin.Context) {
	var body struct {
		Item int64 `json:"item"`
	}
	if err := decodeStrict(c.Request.Body, &body); err != nil {
		writeError(c, err)
		return
	}
	if body.Item <= 0 {
		writeError(c, fmt.Errorf("%w: item must be a positive id", inventory.ErrInvalid))
		return
	}
	if l.sup == nil {
		writeError(c, errPauseUnsupported)
		return
	}
	p, err := l.sup.Pause(c.Request.Context(), body.Item)
	if err != nil {
		writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, p)
}
