//go:build unix

package meshca

import (
	"io/fs"
	"syscall"
)

// owner is the uid that owns a file.
func owner(st fs.FileInfo) (int, bool) {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return int(s.Uid), true
	}
	return 0, false
}
