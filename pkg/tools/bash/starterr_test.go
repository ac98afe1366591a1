package bash

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

func TestStartErrorReadsAsItsCauseAndMatchesErrStart(t *testing.T) {
	cause := fmt.Errorf("bash: start /bin/bash in /w: %w", fs.ErrPermission)
	err := fmt.Errorf("run: %w", startError{cause})
	if !errors.Is(err, ErrStart) || !errors.Is(err, fs.ErrPermission) || err.Error() != "run: "+cause.Error() {
		t.Fatalf("%v: Is(ErrStart) %v, Is(ErrPermission) %v", err, errors.Is(err, ErrStart), errors.Is(err, fs.ErrPermission))
	}
	if errors.Is(cause, ErrStart) {
		t.Fatal("an unmarked error matches ErrStart")
	}
}
