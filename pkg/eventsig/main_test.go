package eventsig_test

import (
	"testing"

	"github.com/toolgate/toolgate/internal/testenv"
)

// TestMain gives the tests a state directory of their own.
func TestMain(m *testing.M) { testenv.Main(m) }
