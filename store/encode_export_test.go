package store

// CheckEncodings makes every checkpoint write of this process hold its
// bytes to a full encoding from now on, and returns the count of writes
// checked so far.
func CheckEncodings() (checked func() int64) {
	checkEncodings.Store(true)
	return encodingsChecked.Load
}
