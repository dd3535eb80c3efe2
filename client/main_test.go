package client_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/sagad/sagad/sagatest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, sagatest.LeakOptions()...) }
