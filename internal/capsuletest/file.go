package capsuletest

import (
	"os"
	"path/filepath"
)

func writeFile(dir, name string) error {
	return os.WriteFile(filepath.Join(dir, name), []byte("test file "+name+"\n"), 0o644)
}
