package inventory

import "context"

// Interceptor stands between the steps of one purchase. A caller that wants to act on one
// purchase (a test, a fault injected on purpose) puts one in the purchase's context with
// WithInterceptor; the production path never sets one. A purchase that carries one takes a
// lock hold of its own (it is never coalesced with other buyers), so that what is done to it
// touches no other purchase. The service retries a purchase once after a lost lock or a
// refused stale write: the retry is a new attempt, asked again (an interceptor that acts once
// keeps that state itself). Its methods run on the purchase's goroutine.
type Interceptor interface {
	// Locker returns the lock service this purchase takes its item's lock from, given the one
	// its strategy would use (return l to change nothing; l may be nil when the strategy has no
	// lock service configured). Called once per attempt, by the strategies that take a lock.
	Locker(strategy string, l Locker) Locker
	// BeforeWrite runs after the work and the last check of the lock, just before the write
	// (before every write attempt: optimistic calls it once per round); an error ends the
	// attempt with nothing written. ctx is the purchase's, not the lock's: what BeforeWrite
	// does is not watched by the lock.
	BeforeWrite(ctx context.Context, itemID int64, strategy string) error
}

type interceptorKey struct{}

// WithInterceptor returns a copy of ctx under which a purchase (Service.Purchase) runs through
// i. A nil i is no interceptor. An Interceptor acts on single purchases only: Checkout and
// PlaceHold refuse a context that carries one (ErrInvalid).
func WithInterceptor(ctx context.Context, i Interceptor) context.Context {
	return context.WithValue(ctx, interceptorKey{}, i)
}

// interceptorOf returns the interceptor of ctx, or nil.
func interceptorOf(ctx context.Context) Interceptor {
	i, _ := ctx.Value(interceptorKey{}).(Interceptor)
	return i
}

// lockerFor returns the locker p takes its lock from: l, or what p's interceptor puts in its
// place.
func (p purchase) lockerFor(strategy string, l Locker) Locker {
	if p.intercept == nil {
		return l
	}
	return p.intercept.Locker(strategy, l)
}

// beforeWrite runs p's interceptor, if any, just before the write.
func (p purchase) beforeWrite(ctx context.Context, strategy string) error {
	if p.intercept == nil {
		return nil
	}
	return p.intercept.BeforeWrite(ctx, p.itemID, strategy)
}
