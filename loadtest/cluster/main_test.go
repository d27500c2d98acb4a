package cluster

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stockguard/stockguard/loadtest/internal/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.Main(m, filepath.Join("..", ".."))) }
