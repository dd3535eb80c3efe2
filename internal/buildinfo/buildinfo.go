package buildinfo

import (
	"fmt"
	"runtime/debug"
)

// String is one line naming program, its version, revision and Go version,
// e.g. "sagad v0.3.0 (rev 41287d7a1b2c, modified; go1.26.8)".
func String(program string) string {
	info, _ := debug.ReadBuildInfo()
	return format(program, info)
}

// revLen shortens the revision the way `git log --oneline` would, a little
// longer to stay unambiguous.
const revLen = 12

// format is [String] of a given build info; a nil info (a binary built
// without module support) reads as devel with an unknown revision.
func format(program string, info *debug.BuildInfo) string {
	version, goVersion := "devel", "unknown"
	rev, modified := "unknown", false
	if info != nil {
		goVersion = info.GoVersion
		// `go build` in a checkout stamps "(devel)"; `go install m@v` the
		// module version. Go 1.24+ may also stamp a pseudo-version derived
		// from the VCS: kept, it names the commit too.
		if v := info.Main.Version; v != "" && v != "(devel)" {
			version = v
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
				if len(rev) > revLen {
					rev = rev[:revLen]
				}
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if modified {
		rev += ", modified"
	}
	return fmt.Sprintf("%s %s (rev %s; %s)", program, version, rev, goVersion)
}

// Version is the running binary's version as OpenTelemetry's
// service.version wants it: the module version `go install m@v` stamped,
// else "devel" with the revision when the build knows it
// ("devel+41287d7a1b2c").
func Version() string {
	info, _ := debug.ReadBuildInfo()
	return versionOf(info)
}

func versionOf(info *debug.BuildInfo) string {
	if info == nil {
		return "devel"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && s.Value != "" {
			return "devel+" + s.Value[:min(len(s.Value), revLen)]
		}
	}
	return "devel"
}
