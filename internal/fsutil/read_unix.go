//go:build unix

package fsutil

import "syscall"

const openNonblock = syscall.O_NONBLOCK
