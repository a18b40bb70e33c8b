package installcni

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// tmpPrefix marks our temp files; its leading dot and lack of a config
// extension keep libcni from ever reading one.
const tmpPrefix = ".meshctl-tmp-"

// writeAtomic replaces path with data in mode via rename, so readers see the
// old file or the new one, never a partial one.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	return writeAtomicIf(path, data, mode, nil)
}

// writeAtomicIf is writeAtomic that calls unchanged just before the rename
// and gives up if it fails. It narrows the read-modify-write race with
// another CNI rewriting the file to the rename itself: a change that landed
// while we were writing is not overwritten, and the caller tries again.
func writeAtomicIf(path string, data []byte, mode os.FileMode, unchanged func() error) error {
	return replaceWith(path, mode, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}, unchanged)
}

// copyAtomic installs src at dst (mode 0755) via rename: the runtime may
// exec the plugin at any moment and must never find a partial binary.
func copyAtomic(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("opening plugin binary: %w", err)
	}
	defer in.Close()
	return replaceWith(dst, 0o755, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	}, nil)
}

func replaceWith(path string, mode os.FileMode, fill func(io.Writer) error, unchanged func() error) error {
	f, err := os.CreateTemp(filepath.Dir(path), tmpPrefix+filepath.Base(path)+"-")
	if err != nil {
		return fmt.Errorf("creating temp file for %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	err = fill(f)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if unchanged != nil {
		if err := unchanged(); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("replacing %s: %w", path, err)
	}
	return nil
}

// removeStaleTemps deletes temp files a killed predecessor left behind.
func removeStaleTemps(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("listing %s: %w", dir, err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !os.IsNotExist(err) {
				return fmt.Errorf("removing stale temp file: %w", err)
			}
		}
	}
	return nil
}
