package workspace

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkReplace measures what a write costs: WriteFile (confined to
// the root, the target's mode and owner kept, a temporary file written,
// fsynced and renamed over the target) beside the bare system calls of
// that atomic replace, 1 KiB into one of 64 files of a directory, one
// after another and 64 at a time. The two alternate write by write, each
// in its own directory of the same file system, so that the file
// system's journal, whose commits dominate and vary, weighs on both
// alike; each is reported in ns per write of its own:
//
//	go test ./pkg/tools/workspace -run '^$' -bench Replace -benchmem
func BenchmarkReplace(b *testing.B) {
	root := b.TempDir()
	w, err := Open(root)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	bare := filepath.Join(root, "bare")
	if err := os.Mkdir(bare, 0o755); err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 1024)
	var seq atomic.Int64
	var nsBare, nsWS, nBare, nWS atomic.Int64
	write := func() error {
		i := seq.Add(1)
		name := strconv.FormatInt(i/2%64, 10) + ".txt"
		start := time.Now()
		if i%2 == 0 {
			if err := bareReplace(filepath.Join(bare, name), i, data); err != nil {
				return err
			}
			nsBare.Add(int64(time.Since(start)))
			nBare.Add(1)
			return nil
		}
		if _, err := w.WriteFile("ws/"+name, data, 0o644, nil); err != nil {
			return err
		}
		nsWS.Add(int64(time.Since(start)))
		nWS.Add(1)
		return nil
	}
	report := func(b *testing.B) {
		if n := nBare.Load(); n > 0 {
			b.ReportMetric(float64(nsBare.Load())/float64(n), "ns/bare")
		}
		if n := nWS.Load(); n > 0 {
			b.ReportMetric(float64(nsWS.Load())/float64(n), "ns/WriteFile")
		}
	}
	reset := func() {
		for _, v := range []*atomic.Int64{&nsBare, &nsWS, &nBare, &nWS} {
			v.Store(0)
		}
	}
	b.Run("serial", func(b *testing.B) {
		reset()
		for b.Loop() {
			if err := write(); err != nil {
				b.Fatal(err)
			}
		}
		report(b)
	})
	b.Run("parallel64", func(b *testing.B) {
		reset()
		b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := write(); err != nil {
					b.Error(err)
					return
				}
			}
		})
		report(b)
	})
}

// bareReplace is the atomic replace with nothing around it: create a
// temporary file beside target, write, fsync, close, rename over target.
func bareReplace(target string, i int64, data []byte) error {
	tmp := target + ".tmp-" + strconv.FormatInt(i, 10)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, target)
}
