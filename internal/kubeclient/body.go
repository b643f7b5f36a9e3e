package kubeclient

import (
	"errors"
	"io"
	"sync"
)

// releaseOnClose calls release once: when the body is closed, or read to
// its end (so a caller that drains without closing does not hold a slot).
type releaseOnClose struct {
	io.ReadCloser
	once    sync.Once
	release func()
}

func (b *releaseOnClose) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.once.Do(b.release)
	}
	return n, err
}

func (b *releaseOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.release)
	return err
}
