package builtin

import (
	"context"
	"fmt"
	"io"
	"path"
	"runtime"
	"slices"
	"sync"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/toolgate/toolgate/pkg/tools"
	"github.com/toolgate/toolgate/pkg/tools/workspace"
)

type searchStats struct {
	searched, binary, large, denied, unreadable int
	storedFull                                  bool
}

type grepJob struct {
	seq  int
	path string
	f    io.ReadCloser
	size int64
}

// search walks base and searches the files on GOMAXPROCS workers; results
// come back in walk (path) order.
func (s *set) search(ctx context.Context, base string, opts workspace.WalkOptions, check workspace.Checker, m *matcher, o *grepOptions) ([]*fileResult, workspace.WalkTop, searchStats, error) {
	var st searchStats
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan grepJob, 64)
	var (
		mu      sync.Mutex
		results []*fileResult
		stored  int
		wg      sync.WaitGroup
	)
	workers := max(1, runtime.GOMAXPROCS(0))
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for j := range jobs {
				if ctx.Err() != nil {
					j.f.Close()
					continue
				}
				var r *fileResult
				r, buf = s.searchFile(j, buf, m, o)
				j.f.Close()
				if r == nil {
					continue
				}
				mu.Lock()
				if r.binary && r.count == 0 {
					st.binary++
				}
				if r.skipped != "" {
					st.unreadable++
				} else {
					st.searched++
				}
				if r.count > 0 {
					n := 0
					for _, l := range r.lines {
						n += len(l)
					}
					if stored+n > o.maxStored {
						r.lines = nil
						st.storedFull = true
					}
					stored += n
					results = append(results, r)
				}
				note := ""
				if o.progress != nil && r.skipped == "" && st.searched%grepProgressFiles == 0 {
					note = fmt.Sprintf("searched %d files, %d with matches\n", st.searched, len(results))
				}
				mu.Unlock()
				if note != "" {
					o.progress(tools.StreamStatus, note)
				}
			}
		}()
	}
	seq := 0
	top, err := s.ws.Walk(ctx, base, opts, check, func(e *workspace.Entry) error {
		if !o.wants(e.Rel) {
			return nil
		}
		if check != nil && check(e.Real()) != nil {
			mu.Lock()
			st.denied++
			mu.Unlock()
			return nil
		}
		f, fi, err := e.Open()
		if err != nil {
			mu.Lock()
			st.unreadable++
			mu.Unlock()
			return nil
		}
		if check != nil && workspace.Links(fi) > 1 {
			f.Close()
			mu.Lock()
			st.denied++
			mu.Unlock()
			return nil
		}
		if o.maxSize > 0 && fi.Size() > o.maxSize {
			f.Close()
			mu.Lock()
			st.large++
			mu.Unlock()
			return nil
		}
		seq++
		select {
		case jobs <- grepJob{seq: seq, path: s.display(e.Real()), f: f, size: fi.Size()}:
			return nil
		case <-ctx.Done():
			f.Close()
			return ctx.Err()
		}
	})
	close(jobs)
	wg.Wait()
	if err != nil {
		return nil, top, st, err
	}
	slices.SortFunc(results, func(a, b *fileResult) int { return a.seq - b.seq })
	return results, top, st, nil
}

// wants applies the glob and type filters to a path relative to the top.
func (o *grepOptions) wants(rel string) bool {
	name := path.Base(rel)
	for _, g := range o.globs {
		subject := rel
		if g.basename {
			subject = name
		}
		if doublestar.MatchUnvalidated(g.pattern, subject) == g.negate {
			return false
		}
	}
	if len(o.types) > 0 {
		for _, t := range o.types {
			if ok, _ := path.Match(t, name); ok {
				return true
			}
		}
		return false
	}
	return true
}
