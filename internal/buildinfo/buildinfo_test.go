package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFormat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"no build info", nil, "sagad devel (rev unknown; unknown)"},
		{"checkout build", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			"sagad devel (rev unknown; go1.26.8)"},
		{"released", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "41287d7a1b2c3d4e5f60718293a4b5c6d7e8f901"}, {Key: "vcs.modified", Value: "false"}}},
			"sagad v1.2.3 (rev 41287d7a1b2c; go1.26.8)"},
		{"dirty checkout", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "true"}}},
			"sagad devel (rev abc, modified; go1.26.8)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, format("sagad", tt.info))
		})
	}
}

func TestStringNamesGoVersion(t *testing.T) {
	t.Parallel()
	s := String("sagactl")
	require.True(t, strings.HasPrefix(s, "sagactl "), s)
	require.Contains(t, s, runtime.Version())
}

func TestVersionOf(t *testing.T) {
	t.Parallel()
	require.Equal(t, "devel", versionOf(nil))
	require.Equal(t, "v1.2.3", versionOf(&debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}))
	require.Equal(t, "devel+41287d7a1b2c", versionOf(&debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "41287d7a1b2c3d4e5f"}}}))
	require.NotEmpty(t, Version())
}
