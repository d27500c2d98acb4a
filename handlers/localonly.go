package handlers

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
)

// errForbidden: a request to a route of a demo on loopback that another web page could have
// sent (LocalOnly).
var errForbidden = errors.New("forbidden")

// LocalOnly guards the routes that act (reset, pause, a burst of purchases) of a demo that
// listens on loopback and so asks no token: only the demo's own page, or a tool on this
// machine, may call them, not another web page the user visits while the demo runs. It
// refuses, 403 forbidden:
//   - a request whose Host is not a loopback name or address (DNS rebinding: a name of another
//     site that resolves to 127.0.0.1);
//   - a cross-origin browser request that acts (net/http's CrossOriginProtection:
//     Sec-Fetch-Site, else Origin against Host; a browser sends one or the other with every
//     POST, a form's and a "simple" fetch's included, and a tool such as curl neither).
//
// A demo that listens beyond loopback asks the admin token instead (RequireAdmin): a
// cross-origin page cannot send an Authorization header without a preflight either.
func LocalOnly() gin.HandlerFunc {
	cop := http.NewCrossOriginProtection()
	return func(c *gin.Context) {
		r := c.Request
		if !loopbackHost(r.Host) {
			writeError(c, fmt.Errorf("%w: host %q is not this machine's loopback (a demo on loopback answers only its own page)", errForbidden, r.Host))
			return
		}
		if err := cop.Check(r); err != nil {
			writeError(c, fmt.Errorf("%w: a cross-origin request (another web page) may not act on the demo: %v", errForbidden, err))
			return
		}
		c.Next()
	}
}

// loopbackHost reports whether host (a Host header, with or without a port) names this
// machine's loopback: localhost, or a loopback address.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
