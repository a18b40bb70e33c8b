// Package nftutil is the nftables plumbing shared by the in-pod rules
// (redirect) and the node-side rules (probesnat): each keeps everything in
// one inet table of its own, so owning, replacing and removing it is a
// table operation that cannot disturb anybody else's rules.
package nftutil

import (
	"errors"
	"fmt"
	"os"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

// Open returns a netlink connection to nftables in netns, or in the
// caller's netns when netns is nil. It needs no thread switching: the
// socket itself is created in the target netns.
func Open(netns *os.File) (*nftables.Conn, error) {
	var opts []nftables.ConnOption
	if netns != nil {
		opts = append(opts, nftables.WithNetNSFd(int(netns.Fd())))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("opening nftables: %w", err)
	}
	return c, nil
}

// Table is the inet table called name.
func Table(name string) *nftables.Table {
	return &nftables.Table{Family: nftables.TableFamilyINet, Name: name}
}

// TableExists reports whether the inet table name exists.
func TableExists(c *nftables.Conn, name string) (bool, error) {
	_, err := c.ListTableOfFamily(name, nftables.TableFamilyINet)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("listing nftables table %s: %w", name, err)
	}
	return true, nil
}

// DeleteTable removes the inet table name from netns; a missing table is
// not an error, so retried cleanups succeed.
func DeleteTable(netns *os.File, name string) error {
	c, err := Open(netns)
	if err != nil {
		return err
	}
	ok, err := TableExists(c, name)
	if err != nil || !ok {
		return err
	}
	c.DelTable(Table(name))
	if err := c.Flush(); err != nil {
		return fmt.Errorf("deleting nftables table %s: %w", name, err)
	}
	return nil
}
