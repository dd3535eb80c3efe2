package daemon

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MinServerVersion is the oldest nats-server sagad runs on: 2.11 brought
// per-message TTL (Nats-TTL, which the retention of events and markers
// rests on) and consumer pause (`sagactl phase pause`, `pause --all`). On
// an older server they fail later and obscurely; sagad refuses at startup.
const MinServerVersion = "2.11.0"

// ErrServerTooOld is wrapped by the error of a connection to a nats-server
// older than [MinServerVersion].
var ErrServerTooOld = errors.New("nats-server too old")

// checkServerVersion refuses a server version older than
// [MinServerVersion]. ok is false when the version does not parse (a
// custom build): sagad then goes on, and logs it.
func checkServerVersion(version string) (ok bool, err error) {
	have, ok := parseVersion(version)
	if !ok {
		return false, nil
	}
	want, _ := parseVersion(MinServerVersion)
	for i := range have {
		if have[i] != want[i] {
			if have[i] < want[i] {
				return true, fmt.Errorf("%w: the server runs %s, sagad needs %s or later (per-message TTL, consumer pause)",
					ErrServerTooOld, version, MinServerVersion)
			}
			break
		}
	}
	return true, nil
}

// parseVersion reads "2.11.3", "v2.11.3" or "2.12.0-RC.1" (a pre-release
// counts as its release) as major, minor, patch.
func parseVersion(v string) ([3]int, bool) {
	var out [3]int
	v = strings.TrimPrefix(v, "v")
	if i := strings.IndexAny(v, "-+"); i >= 0 {
		v = v[:i]
	}
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return out, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return out, false
		}
		out[i] = n
	}
	return out, true
}
