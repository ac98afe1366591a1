// Package browser holds the tests that drive the approver's page in a real
// chromium through chromedp. It is a module of its own so that chromedp and
// what it needs stay out of the main module's build graph; .ci/run runs it
// with the rest.
package browser

import (
	"testing"

	"github.com/toolgate/toolgate/internal/testenv"
)

// TestMain gives the tests a state directory of their own.
func TestMain(m *testing.M) { testenv.Main(m) }
