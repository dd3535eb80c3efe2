package daemon

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDocsSagadFlagsExist: every sagad flag the docs, the deploy kit and the
// Dockerfile show, and every SAGAD_* variable they name, is one sagad reads.
func TestDocsSagadFlagsExist(t *testing.T) {
	t.Parallel()
	var usage bytes.Buffer
	_, _ = parseConfig([]string{"-h"}, envOf(nil), &usage)
	flags := map[string]bool{"h": true, "help": true}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-[a-z], )?--([a-z-]+)`).FindAllStringSubmatch(usage.String(), -1) {
		flags[m[1]] = true
	}
	// The secrets have a variable and no flag.
	envs := map[string]bool{"SAGAD_NATS_PASSWORD": true, "SAGAD_NATS_TOKEN": true}
	for _, m := range regexp.MustCompile(`\bSAGAD_[A-Z_]*[A-Z]\b`).FindAllString(usage.String(), -1) {
		envs[m] = true
	}
	require.True(t, flags["replicas"] && envs["SAGAD_REPLICAS"], "the usage text parsed")

	files := []string{"../../../README.md", "../../../deploy/README.md", "../../../Dockerfile", "../../../deploy/compose/compose.yaml",
		"../../../deploy/systemd/sagad.service", "../../../deploy/systemd/sagad.env"}
	docs, err := filepath.Glob("../../../docs/*.md")
	require.NoError(t, err)
	files = append(files, docs...)
	call := regexp.MustCompile(`(?:^|[\s/"])sagad\s+((?:--?[a-z][a-z-]*(?:[= ][^\s` + "`" + `]+)?\s*)+)`)
	flag := regexp.MustCompile(`(?:^|\s)--?([a-z][a-z-]*)`)
	env := regexp.MustCompile(`\bSAGAD_[A-Z_]*[A-Z]\b`)
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range call.FindAllStringSubmatchIndex(line, -1) {
				if before := strings.Fields(line[:m[0]+1]); len(before) > 0 && strings.HasPrefix(before[len(before)-1], "-") {
					continue // an option's value: docker run --name sagad, journalctl -u sagad
				}
				for _, fm := range flag.FindAllStringSubmatch(line[m[2]:m[3]], -1) {
					require.True(t, flags[fm[1]], "%s:%d: sagad has no flag --%s: %s", f, i+1, fm[1], line)
					checked++
				}
			}
			for _, name := range env.FindAllString(line, -1) {
				require.True(t, envs[name], "%s:%d: sagad reads no %s: %s", f, i+1, name, line)
			}
		}
	}
	require.GreaterOrEqual(t, checked, 5, "the docs show sagad flags; the parser found too few")
}
