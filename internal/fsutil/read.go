package fsutil

import (
	"fmt"
	"io"
	"io/fs"
	"os"
)

// ReadRegularFile reads path, which must be a regular file of at most limit
// bytes. A user-named input file can be anything: /dev/zero never ends, a
// FIFO blocks until someone writes to it, and a huge file exhausts memory;
// each is refused with an error naming the path, instead of hanging.
func ReadRegularFile(path string, limit int64) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("reading %s: not a regular file (%s)", path, describeMode(st.Mode()))
	}
	// Non-blocking, so that a FIFO swapped in after the Stat cannot make
	// Open wait for a writer; the Stat of the open file decides.
	f, err := os.OpenFile(path, os.O_RDONLY|openNonblock, 0)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	defer f.Close()
	if st, err = f.Stat(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("reading %s: not a regular file (%s)", path, describeMode(st.Mode()))
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("reading %s: %d bytes is more than the limit of %d", path, st.Size(), limit)
	}
	// The size can grow while reading: read one byte past the limit to
	// tell.
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("reading %s: more than the limit of %d bytes", path, limit)
	}
	return data, nil
}

func describeMode(m fs.FileMode) string {
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
		return "a device"
	}
	return "mode " + m.String()
}
