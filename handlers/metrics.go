package handlers

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stockguard/stockguard/inventory"
)

// metricsNamespace prefixes every metric name.
const metricsNamespace = "stockguard"

// stockScrapeTimeout bounds the catalogue read of one scrape.
const stockScrapeTimeout = 2 * time.Second

// Metrics holds the storefront's Prometheus metrics and serves them on /metrics.
type Metrics struct {
	purchases    *prometheus.CounterVec   // by strategy and result
	purchaseTime *prometheus.HistogramVec // by strategy
	degraded     *prometheus.CounterVec   // orders sold by the guard alone while Redis was down, by strategy
	lockWait     prometheus.Histogram
	lockHeld     prometheus.Histogram
	lockRenewals prometheus.Counter
	lockLosses   prometheus.Counter
	batchSize    prometheus.Histogram
	holdCarts    prometheus.Histogram
	holds        *prometheus.CounterVec // by item
	checkouts    *prometheus.CounterVec // POST /api/checkout by result
	stockHolds   *prometheus.CounterVec // the hold routes by operation and result
	stock        *stockCollector
	handler      http.Handler
}

// NewMetrics registers the storefront's metrics, the Go runtime and process collectors on reg
// and returns them; nil reg means a new registry. It panics if a metric of the same name is
// already registered on reg (as prometheus.MustRegister does).
func NewMetrics(reg *prometheus.Registry) *Metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	latency := []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	m := &Metrics{
		purchases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "purchases_total",
			Help: "Purchase requests by strategy and result (created, replayed, or the error code).",
		}, []string{"strategy", "result"}),
		purchaseTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Name: "purchase_duration_seconds",
			Help:    "Time the inventory service took to answer a purchase, by strategy.",
			Buckets: latency,
		}, []string{"strategy"}),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "purchases_degraded_total",
			Help: "Orders created through the database guard alone while Redis was unavailable (--on-redis-down=guard), by strategy.",
		}, []string{"strategy"}),
		lockWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Name: "lock_wait_seconds",
			Help:    "Time spent waiting for an item lock before obtaining it.",
			Buckets: latency,
		}),
		lockHeld: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Name: "lock_held_seconds",
			Help:    "Time an item lock was held, measured at release.",
			Buckets: latency,
		}),
		lockRenewals: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "lock_renewals_total",
			Help: "Lease renewals of held locks by the watchdog.",
		}),
		lockLosses: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "lock_losses_total",
			Help: "Locks found lost (expired or taken) while held.",
		}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Name: "batch_size",
			Help:    "Orders written by one coalesced lock hold (lock+guard, redlock+guard).",
			Buckets: []float64{0, 1, 2, 4, 8, 16, 32, 64, 128, 256},
		}),
		holdCarts: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Name: "hold_carts",
			Help:    "Carts (checkouts and stock hold placements) served by one coalesced lock hold of lock+guard, at their anchor item; _sum/_count is the mean carts per hold.",
			Buckets: []float64{0, 1, 2, 4, 8, 16, 32, 64},
		}),
		holds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "holds_total",
			Help: "Coalesced lock holds by item; rate() gives holds per second per item.",
		}, []string{"item_id"}),
		checkouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "checkouts_total",
			Help: "Cart checkouts (POST /api/checkout) by result (created, replayed, or the error code).",
		}, []string{"result"}),
		stockHolds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "stock_hold_requests_total",
			Help: "Stock hold requests by op (place, confirm, cancel) and result (created, replayed, cancelled, or the error code).",
		}, []string{"op", "result"}),
		stock: &stockCollector{desc: prometheus.NewDesc(
			prometheus.BuildFQName(metricsNamespace, "", "item_stock"),
			"Current stock of each item, read from the database at scrape time.",
			[]string{"item_id", "sku"}, nil)},
	}
	reg.MustRegister(m.purchases, m.purchaseTime, m.degraded, m.lockWait, m.lockHeld, m.lockRenewals,
		m.lockLosses, m.batchSize, m.holdCarts, m.holds, m.checkouts, m.stockHolds, m.stock,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// A collector that fails (the stock gauge, when the database does not answer) leaves its
	// metric out of the scrape: every other metric is still served (promhttp's default would
	// answer 500 and lose them all, the breaker's state too, when they are needed most).
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, ErrorHandling: promhttp.ContinueOnError})
	return m
}

// Metrics is an inventory.LockObserver: main feeds it the item locks' events.
var _ inventory.LockObserver = (*Metrics)(nil)

// LockAcquired records the wait for a lock just obtained.
func (m *Metrics) LockAcquired(_ string, _ int64, waited time.Duration) {
	m.lockWait.Observe(waited.Seconds())
}

// LockRenewed counts a lease renewal of a held lock.
func (m *Metrics) LockRenewed(string) { m.lockRenewals.Inc() }

// LockLost counts a held lock found lost (expired or taken).
func (m *Metrics) LockLost(string, error) { m.lockLosses.Inc() }

// LockReleased records how long a released lock was held.
func (m *Metrics) LockReleased(_ string, held time.Duration) { m.lockHeld.Observe(held.Seconds()) }

// Metrics is an inventory.HoldObserver: main passes it to the service.
var _ inventory.HoldObserver = (*Metrics)(nil)

// Hold records one coalesced lock hold of itemID and the orders it wrote.
func (m *Metrics) Hold(_ string, itemID int64, orders int) {
	m.batchSize.Observe(float64(orders))
	m.holds.WithLabelValues(strconv.FormatInt(itemID, 10)).Inc()
}

// Metrics is an inventory.CartHoldObserver too.
var _ inventory.CartHoldObserver = (*Metrics)(nil)

// CartHold records the carts one coalesced lock hold sold (0 when it sold none).
func (m *Metrics) CartHold(_ string, _ int64, carts int) {
	m.holdCarts.Observe(float64(carts))
}

// observePurchase counts one purchase under its strategy and result, and its service time
// when the service was called (elapsed > 0).
func (m *Metrics) observePurchase(strategy, result string, elapsed time.Duration) {
	if m == nil {
		return
	}
	m.purchases.WithLabelValues(strategy, result).Inc()
	if elapsed > 0 {
		m.purchaseTime.WithLabelValues(strategy).Observe(elapsed.Seconds())
	}
}

// observeDegraded counts one order created without the lock, Redis being down.
func (m *Metrics) observeDegraded(strategy string) {
	if m != nil {
		m.degraded.WithLabelValues(strategy).Inc()
	}
}

// watchStock makes the stock gauge read items from src at scrape time.
func (m *Metrics) watchStock(src itemLister) {
	if src != nil {
		m.stock.src.Store(&src)
	}
}

// ServeHTTP serves the metrics in the Prometheus text format.
func (m *Metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) { m.handler.ServeHTTP(w, r) }

// itemLister is the part of Service the stock gauge reads.
type itemLister interface {
	ListItems(ctx context.Context) ([]inventory.Item, error)
}

// stockCollector reports stockguard_item_stock{item_id,sku} from the catalogue at scrape time.
// Before a source is set, or when the read fails, it reports nothing (the scrape still works).
type stockCollector struct {
	desc *prometheus.Desc
	src  atomic.Pointer[itemLister]
}

func (c *stockCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *stockCollector) Collect(ch chan<- prometheus.Metric) {
	src := c.src.Load()
	if src == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), stockScrapeTimeout)
	defer cancel()
	items, err := (*src).ListItems(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for _, it := range items {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(it.Stock),
			strconv.FormatInt(it.ID, 10), it.SKU)
	}
}

// observePurchase records one purchase answer in the metrics. called tells whether the
// service was called (only then is its time observed).
func (s *server) observePurchase(c *gin.Context, strategy string, called bool, start time.Time) {
	if s.metrics == nil {
		return
	}
	if !s.offered[strategy] { // none named, or a name the service refused: no unbounded labels
		strategy = s.defaultStrategy
	}
	result := errorCode(c)
	switch {
	case result != "":
	case c.Writer.Status() == http.StatusOK:
		result = "replayed"
	default:
		result = "created"
	}
	var elapsed time.Duration
	if called {
		elapsed = max(time.Since(start), time.Nanosecond)
	}
	s.metrics.observePurchase(strategy, result, elapsed)
}

// The cart routes whose answers /metrics counts.
const (
	cartCheckout = "checkout" // POST /api/checkout: stockguard_checkouts_total
	cartPlace    = "place"    // POST /api/holds: stockguard_stock_hold_requests_total{op="place"}
	cartConfirm  = "confirm"  // POST /api/holds/:id/confirm
	cartCancel   = "cancel"   // DELETE /api/holds/:id
)

// counted returns the middleware that counts every answer of the cart route op, once the
// rest of the chain (the purchase bound included) has answered: by its error code, else
// created (201), replayed (200) or cancelled (204).
func (s *server) counted(op string) gin.HandlerFunc {
	if s.metrics == nil {
		return func(c *gin.Context) { c.Next() }
	}
	return func(c *gin.Context) {
		c.Next()
		result := errorCode(c)
		if result == "" {
			switch c.Writer.Status() {
			case http.StatusOK:
				result = "replayed"
			case http.StatusNoContent:
				result = "cancelled"
			default:
				result = "created"
			}
		}
		if op == cartCheckout {
			s.metrics.checkouts.WithLabelValues(result).Inc()
			return
		}
		s.metrics.stockHolds.WithLabelValues(op, result).Inc()
	}
}
