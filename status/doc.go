// Package status is what sagad shows of a capsule — its [Status], rendered
// from its checkpoint — and the JetStream reads behind it: status, list,
// history and a wait for the capsule to settle. sagad's admin service serves
// them to operators; package client re-exports them for Go callers.
package status
