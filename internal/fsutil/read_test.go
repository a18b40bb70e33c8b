package fsutil

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestReadFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	small := filepath.Join(dir, "small.yaml")
	if err := os.WriteFile(small, []byte("clusters: 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	exact := filepath.Join(dir, "exact")
	if err := os.WriteFile(exact, make([]byte, 1024), 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, 1025), 0o644); err != nil {
		t.Fatal(err)
	}
	// A FIFO with no writer: opening it for reading would block forever.
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path    string
		wantErr error
		wantMsg string
	}{
		{small, nil, ""},
		{exact, nil, ""},
		{big, ErrTooLarge, "larger than the limit of 1 KiB"},
		{fifo, ErrNotRegular, "not a regular file (a named pipe)"},
		{"/dev/zero", ErrNotRegular, "not a regular file (a character device)"},
		{dir, ErrNotRegular, "not a regular file (a directory)"},
		{filepath.Join(dir, "missing"), os.ErrNotExist, "missing"},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.path), func(t *testing.T) {
			data, err := ReadFile(tt.path, 1024)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				want, _ := os.ReadFile(tt.path)
				if string(data) != string(want) {
					t.Errorf("read %q, want %q", data, want)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantMsg) || !strings.Contains(err.Error(), tt.path) {
				t.Errorf("error %v, want %v naming %s and saying %q", err, tt.wantErr, tt.path, tt.wantMsg)
			}
		})
	}
}
