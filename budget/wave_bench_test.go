package budget_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/internal/natstest"
)

// BenchmarkReserveRelease measures one capsule's admission and release on
// one shared, uncontended-by-cap wave, with goroutines racing for its
// record (every change is a compare-and-set of it):
//
//	go test -run XXX -bench ReserveRelease -benchtime 2000x ./budget
func BenchmarkReserveRelease(b *testing.B) {
	for _, par := range []int{1, 8} {
		b.Run(fmt.Sprintf("racers=%d", par), func(b *testing.B) {
			ctx := context.Background()
			_, js := natstest.Connect(b, natstest.RunServer(b))
			tr, err := budget.New(ctx, js, budget.Config{})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tr.ChangeWave(ctx, "bw", budget.WaveChange{Tokens: i64(1 << 40)}); err != nil {
				b.Fatal(err)
			}
			var n atomic.Int64
			b.SetParallelism(par)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					holder := fmt.Sprint("c", n.Add(1))
					if _, err := tr.Reserve(ctx, "bw", holder, tokens(1000)); err != nil {
						b.Error(err)
						return
					}
					if _, _, err := tr.Release(ctx, "bw", holder); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
