// Package logline is sagad's slog handler: the text and JSON lines of
// slog.NewTextHandler and slog.NewJSONHandler, byte for byte, written
// without slog's generic machinery for the lines sagad writes most (one
// per transition, several per capsule).
//
// A [Handler] formats a record itself when it has no groups and every
// attribute is a string, integer, unsigned integer, boolean, duration,
// time (years 0 to 9999) or, in text, a float. Any other record (an Any
// or LogValuer value, an error, a group, a JSON float, a time beyond year
// 9999) goes to slog's own handler, built with the same options and
// writing through the same lock, so the output never differs from
// slog's. The differential pair in this package's tests holds the two to
// the same bytes.
package logline
