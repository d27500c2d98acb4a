package locking

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkObtainManyRelease is one uncontended ObtainMany+Release of 1, 2 and 4 keys, next
// to Obtain+Release of one Lock ("lock", as BenchmarkObtainRelease) in the same run: n
// acquire round trips, one at a time in key order, and one pipelined release. It reports the
// Redis commands per hold.
func BenchmarkObtainManyRelease(b *testing.B) {
	b.Run("lock", func(b *testing.B) {
		c := newClient(b, nil, nil)
		ctx := context.Background()
		key := uniqueKey(b)
		before := commandsProcessed(b, c.rdb)
		for b.Loop() {
			l, err := c.Obtain(ctx, key)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(commandsProcessed(b, c.rdb)-before-1)/float64(b.N), "redis-cmds/op")
	})
	for _, n := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			c := newClient(b, nil, nil)
			ctx := context.Background()
			kfs := make([]KeyFloor, n)
			for i := range kfs {
				kfs[i] = KeyFloor{Key: uniqueKey(b)}
			}
			before := commandsProcessed(b, c.rdb)
			for b.Loop() {
				m, err := c.ObtainMany(ctx, kfs)
				if err != nil {
					b.Fatal(err)
				}
				if err := m.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(commandsProcessed(b, c.rdb)-before-1)/float64(b.N), "redis-cmds/op")
		})
	}
}
