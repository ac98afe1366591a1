package workspace

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
)

// What a write costs: WriteFile (confined to the root, the target's mode
// and owner kept, a temporary file written, fsynced and renamed over the
// target) beside the bare system calls of that atomic replace, one after
// another and 64 at a time, 1 KiB into one of 64 files of one directory:
//
//	go test ./pkg/tools/workspace -run '^$' -bench Replace -benchmem

func BenchmarkReplaceWriteFile(b *testing.B) {
	dir := b.TempDir()
	w, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	replace(b, func(i int64, data []byte) error {
		_, err := w.WriteFile("out/"+strconv.FormatInt(i%64, 10)+".txt", data, 0o644, nil)
		return err
	})
}

func BenchmarkReplaceBaseline(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "out")
	if err := os.Mkdir(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	replace(b, func(i int64, data []byte) error {
		target := filepath.Join(dir, strconv.FormatInt(i%64, 10)+".txt")
		tmp := target + ".tmp-" + strconv.FormatInt(i, 10)
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		if _, err := f.Write(data); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		return os.Rename(tmp, target)
	})
}

// replace runs write for 1 KiB one at a time and 64 at a time.
func replace(b *testing.B, write func(i int64, data []byte) error) {
	data := make([]byte, 1024)
	var seq atomic.Int64
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			if err := write(seq.Add(1), data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel64", func(b *testing.B) {
		b.SetParallelism(max(1, 64/runtimeProcs()))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := write(seq.Add(1), data); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }
