package inventory

import (
	"errors"
	"fmt"
	"testing"
)

// A write whose idempotency key collided, and whose replay then failed or found nothing, is
// answered 503 unavailable (retry with the key), never 500: the replay's own mapped error, or
// ErrUnavailable.
func TestCollidedIsUnavailable(t *testing.T) {
	if err := collided("k", "order", nil); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("nothing under the key: %v, want ErrUnavailable", err)
	}
	down := fmt.Errorf("%w: database: connection refused", ErrUnavailable)
	if err := collided("k", "order", down); err != down {
		t.Fatalf("the replay failed: %v, want its error", err)
	}
}
