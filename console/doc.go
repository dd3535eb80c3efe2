// Package console is sagad's web console: a small page served at /ui/ on
// sagad's HTTP listener, embedded in the binary, with no build step and no
// JavaScript framework.
//
// It reads what the pipeline wrote — checkpoints, kept capsule bytes,
// artifacts and the event stream — and acts only through the admin service
// (package adminsvc), with the same verbs sagactl uses, so every action is
// checked, recorded and counted by sagad exactly as a CLI one is.
//
// Listing stays fast with 100k capsules: an in-memory [Index] of one small
// row per checkpoint is filled and kept current by a KV watch on the
// checkpoint bucket, and the list endpoint pages over it server-side. The
// same watch feeds the live updates the browser receives as server-sent
// events (no polling loop in the page).
//
// Everything the page shows comes from untrusted input (capsule fields,
// findings, reasons): the page builds the DOM with textContent only, never
// HTML strings, and the Content-Security-Policy allows only the embedded
// script and style.
package console
