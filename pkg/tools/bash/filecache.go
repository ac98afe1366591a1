package bash

import (
	"os"
	"sync"
	"time"
)

// fileKey identifies one version of a file: its device, inode, size and
// change times.
type fileKey struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64
}

// fileCache keeps a value made from a file, by path, while the file is
// the same version (fileKey): a file changed less than recent before it
// was read is not kept (a change in the same tick of the file system's
// clock would leave its times as they were), and at most max entries are
// (all are dropped when full).
type fileCache[V any] struct {
	recent time.Duration
	max    int

	mu sync.Mutex
	m  map[string]fileCacheEntry[V]
}

type fileCacheEntry[V any] struct {
	key fileKey
	v   V
}

// get is the value kept for p while fi (p's file as it is now) is the
// version it was made from.
func (c *fileCache[V]) get(p string, fi os.FileInfo) (v V, ok bool) {
	key, known := keyOf(fi)
	if !known {
		return v, false
	}
	c.mu.Lock()
	e, hit := c.m[p]
	c.mu.Unlock()
	if !hit || e.key != key {
		return v, false
	}
	return e.v, true
}

// put keeps v, made from p's file as fi describes it (read after fi was
// taken), unless the file changed too recently to be told apart.
func (c *fileCache[V]) put(p string, fi os.FileInfo, v V) {
	key, known := keyOf(fi)
	if !known || time.Since(time.Unix(0, max(key.mtime, key.ctime))) <= c.recent {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= c.max {
		c.m = map[string]fileCacheEntry[V]{}
	}
	c.m[p] = fileCacheEntry[V]{key: key, v: v}
}
