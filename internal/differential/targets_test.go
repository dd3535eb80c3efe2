package differential

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fuzzFunc finds a fuzz target's declaration, and harnessed those that
// run a pair through this package.
var (
	fuzzFunc  = regexp.MustCompile(`(?m)^func (Fuzz\w+)\(f \*testing\.F\)`)
	harnessed = regexp.MustCompile(`(?m)^func (Fuzz\w+)\(f \*testing\.F\)\s*\{\s*differential\.Fuzz\(`)
)

// TestFuzzTargetsListed: every fuzz target that runs a pair is in
// .ci/fuzz-targets, so CI fuzzes it, and every target listed there
// exists in its package.
func TestFuzzTargetsListed(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	listed := map[string]bool{}
	f, err := os.Open(filepath.Join(root, ".ci", "fuzz-targets"))
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		require.Len(t, fields, 2, "line %q: package and target", sc.Text())
		listed[filepath.Clean(fields[0])+" "+fields[1]] = true
	}
	require.NoError(t, sc.Err())

	declared := map[string]bool{}
	require.NoError(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		for _, m := range fuzzFunc.FindAllSubmatch(b, -1) {
			declared[rel+" "+string(m[1])] = true
		}
		for _, m := range harnessed.FindAllSubmatch(b, -1) {
			require.True(t, listed[rel+" "+string(m[1])], "%s runs a differential pair: add \"./%s %s\" to .ci/fuzz-targets", m[1], rel, m[1])
		}
		return nil
	}))
	for l := range listed {
		require.True(t, declared[l], ".ci/fuzz-targets lists %s, which is no fuzz target", l)
	}
}
