//go:build !unix

package fsutil

const openNonblock = 0
