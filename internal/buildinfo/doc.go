// Package buildinfo describes the running binary for `sagad --version` and
// `sagactl --version`: the module version (or "devel" for a build from a
// checkout), the VCS revision it was built from, and the Go version. It
// reads what the Go toolchain embeds (runtime/debug.ReadBuildInfo), so no
// linker flags are needed.
package buildinfo
