package handlers

import (
	"errors"

	"github.com/gin-gonic/gin"
)

// errAtCapacity answers a purchase past Config.MaxPurchases: 503 at_capacity with Retry-After.
//
// Not 429 overloaded, which stays the per-item admission limit's answer: that one says that
// this item's buyers are too many (the client may buy something else, or slow down), this one
// that the storefront process is full whatever is asked (a database or Redis that hangs keeps
// its purchases waiting): 503 is what load balancers and retrying clients read as "try another
// instance, or later". One code per fault.
var errAtCapacity = errors.New("the storefront has as many purchases in flight as it takes; retry later")

// purchaseBound admits at most n purchases at once and answers the others errAtCapacity at
// once, without reading their body or touching the database. n <= 0: no bound. One bound
// serves every route that sells or sets stock aside: a purchase, a checkout, a hold's
// placement and its confirmation each take one slot (cartRoutes).
func purchaseBound(n int) gin.HandlerFunc {
	if n <= 0 {
		return func(c *gin.Context) { c.Next() }
	}
	slots := make(chan struct{}, n)
	return func(c *gin.Context) {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
			c.Next()
		default:
			writeError(c, errAtCapacity)
		}
	}
}
