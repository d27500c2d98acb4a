package handlers

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strings"

	"github.com/gin-gonic/gin"
)

// web holds the shop page (shop.html) with its style sheet and script. Plain files, no build
// step.
//
//go:embed web
var web embed.FS

// Pages replaces the shop page with another one (the lab's).
type Pages struct {
	// FS holds the page and its files, served under /static/ ahead of the shop's own (so the
	// page may use the shared style.css).
	FS fs.FS
	// Index names the file of FS served at / ("index.html" would not do: http.FileServer
	// redirects it to the directory).
	Index string
}

// ServePages adds GET / and GET /static/* to r: the shop page and its files, or, when pages
// is not nil, its page and files ahead of the shop's.
func ServePages(r *gin.Engine, pages *Pages) {
	shop, _ := fs.Sub(web, "web") // the directory is embedded: Sub cannot fail
	index, indexFS := "shop.html", shop
	static := shop
	if pages != nil {
		index, indexFS = pages.Index, pages.FS
		static = overlay{pages.FS, shop}
	}
	r.GET("/", func(c *gin.Context) {
		c.Header("Cache-Control", "no-cache")
		c.FileFromFS(index, http.FS(indexFS))
	})
	files := http.StripPrefix("/static/", http.FileServerFS(static))
	r.GET("/static/*file", func(c *gin.Context) {
		// A file, or the API's JSON 404: never http.FileServer's text 404 or a directory's
		// listing.
		name := strings.TrimPrefix(path.Clean(c.Param("file")), "/")
		if st, err := fs.Stat(static, name); err != nil || st.IsDir() {
			writeError(c, fmt.Errorf("%w: no file %q under /static/", errRouteNotFound, name))
			return
		}
		c.Header("Cache-Control", "no-cache")
		files.ServeHTTP(c.Writer, c.Request)
	})
}

// overlay opens a name in top, else in base.
type overlay struct{ top, base fs.FS }

func (o overlay) Open(name string) (fs.File, error) {
	f, err := o.top.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return o.base.Open(name)
	}
	return f, err
}
