// Package parallel runs one function per item concurrently and keeps every
// error. meshctl fans out per cluster and per node everywhere (create,
// connect, install); errgroup is not used because it keeps only the first
// error, and a user of a three-cluster environment wants to hear about all
// three clusters that failed, in a stable order.
package parallel

import (
	"errors"
	"sync"
)

// ForEach calls f for every item at once and waits for all of them. The
// errors are joined in the order of items (nil ones dropped), so a report
// reads the same way on every run.
func ForEach[T any](items []T, f func(T) error) error {
	errs := make([]error, len(items))
	var wg sync.WaitGroup
	for i, it := range items {
		wg.Go(func() { errs[i] = f(it) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
