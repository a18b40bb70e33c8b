package fsutil

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// MaxInputSize bounds the files people write for meshctl (config, topology,
// values): hand-written YAML or JSON is kilobytes, and a path that names
// /dev/zero or a log by mistake must not eat the machine's memory.
const MaxInputSize = 4 << 20

var (
	// ErrNotRegular is a path that names a device, FIFO, socket or
	// directory: reading one can block forever or never end.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge is a file longer than the reader's limit.
	ErrTooLarge = errors.New("file too large")
)

// ReadFile reads a regular file of at most limit bytes. Anything else is
// refused before a byte is read: the file is opened non-blocking (so a FIFO
// with no writer cannot hang the open) and its type is checked on the open
// descriptor, not the path, so it cannot be swapped in between. A file that
// grows past limit while being read is refused too.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w (%s): only regular files are read", ErrNotRegular, fileType(st.Mode()))}
	}
	if st.Size() > limit {
		return nil, tooLarge(path, limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, tooLarge(path, limit)
	}
	return data, nil
}

func tooLarge(path string, limit int64) error {
	return &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: larger than the limit of %s", ErrTooLarge, size(limit))}
}

func size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

func fileType(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "mode " + m.String()
}
