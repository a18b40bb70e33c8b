package fsutil

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestReadRegularFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, 11), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := ReadRegularFile(small, 10)
	if err != nil || string(got) != "hello" {
		t.Fatalf("ReadRegularFile(small) = %q, %v", got, err)
	}
	for _, tc := range []struct{ path, want string }{
		{big, "more than the limit of 10"},
		// Nothing writes to it: reading it would block forever.
		{fifo, "not a regular file (a named pipe)"},
		{"/dev/zero", "not a regular file (a character device)"},
		{dir, "not a regular file (a directory)"},
		{filepath.Join(dir, "missing"), "no such file"},
	} {
		_, err := ReadRegularFile(tc.path, 10)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path) {
			t.Errorf("ReadRegularFile(%s) = %v, want an error naming the path and saying %q", tc.path, err, tc.want)
		}
	}
}
