// Package deps pins the project's dependencies in go.mod while the packages that use them are
// being written in parallel. Remove it once every dependency has a real importer.
package deps

import (
	_ "github.com/HdrHistogram/hdrhistogram-go"
	_ "github.com/alicebob/miniredis/v2"
	_ "github.com/compose-spec/compose-go/v2/loader"
	_ "github.com/gin-gonic/gin"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/redis/go-redis/v9"
	_ "github.com/stretchr/testify/require"
	_ "go.uber.org/goleak"
	_ "gorm.io/driver/sqlite"
	_ "gorm.io/gorm"
)
