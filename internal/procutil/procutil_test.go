package procutil_test

import (
	"fmt"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/procutil"
)

func TestFreePortCanBeBound(t *testing.T) {
	port, err := procutil.FreePort()
	require.NoError(t, err)
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	require.NoError(t, err)
	require.NoError(t, l.Close())
}

func TestLimitedBufferKeepsTheFirstBytes(t *testing.T) {
	b := &procutil.LimitedBuffer{Max: 10}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := b.Write([]byte("abcd"))
			assert.NoError(t, err)
			assert.Equal(t, 4, n, "a write always reports the whole slice taken")
		}()
	}
	wg.Wait()
	assert.Len(t, b.String(), 10)
}
