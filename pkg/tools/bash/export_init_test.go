package bash

// SetSandboxInit makes tools made from now on look for
// toolgate-sandbox-init at p instead of beside the test binary ("" goes
// back to that); it returns the previous setting.
func SetSandboxInit(p string) string {
	old := sandboxInitPath
	sandboxInitPath = p
	return old
}
