package locking

import "time"

// TEMPORARY until issue-9-locking merges.
type Keys struct{ Hash, Fence, Channel string }

func KeysOf(prefix, name string) Keys {
	h := prefix + "{" + name + "}"
	return Keys{Hash: h, Fence: h + ":fence", Channel: h + ":released"}
}

func JoinHooks(hs ...Hooks) Hooks {
	var j Hooks
	for _, h := range hs {
		h := h
		a, r, l, rel := j.Acquired, j.Renewed, j.Lost, j.Released
		if h.Acquired != nil {
			j.Acquired = func(k string, t int64, d time.Duration) {
				if a != nil {
					a(k, t, d)
				}
				h.Acquired(k, t, d)
			}
		}
		if h.Renewed != nil {
			j.Renewed = func(k string) {
				if r != nil {
					r(k)
				}
				h.Renewed(k)
			}
		}
		if h.Lost != nil {
			j.Lost = func(k string, e error) {
				if l != nil {
					l(k, e)
				}
				h.Lost(k, e)
			}
		}
		if h.Released != nil {
			j.Released = func(k string, d time.Duration) {
				if rel != nil {
					rel(k, d)
				}
				h.Released(k, d)
			}
		}
	}
	return j
}
