package store

// Every checkpoint the package's tests write with a kept history is held
// to its full encoding, with or without the race detector.
func init() { checkKept.Store(true) }

// KeptChecked is how many checkpoint writes were held to their full
// encoding so far.
func KeptChecked() int64 { return keptChecked.Load() }
