package locking

// TEMPORARY until issue-9-locking merges.
type Keys struct{ Hash, Fence, Channel string }

func KeysOf(prefix, name string) Keys {
	h := prefix + "{" + name + "}"
	return Keys{Hash: h, Fence: h + ":fence", Channel: h + ":released"}
}
