package parallel

import (
	"errors"
	"fmt"
	"sync"
	"testing"
)

func TestForEachRunsConcurrentlyAndKeepsEveryErrorInOrder(t *testing.T) {
	items := []int{0, 1, 2, 3}
	// Every call waits until all have started: this deadlocks unless the
	// calls really run at the same time.
	var started sync.WaitGroup
	started.Add(len(items))
	err := ForEach(items, func(i int) error {
		started.Done()
		started.Wait()
		if i%2 == 1 {
			return fmt.Errorf("item %d failed", i)
		}
		return nil
	})
	if err == nil {
		t.Fatal("want the errors of items 1 and 3, got nil")
	}
	if got, want := err.Error(), "item 1 failed\nitem 3 failed"; got != want {
		t.Fatalf("error = %q, want %q", got, want)
	}
}

func TestForEachNoErrors(t *testing.T) {
	if err := ForEach([]string{"a", "b"}, func(string) error { return nil }); err != nil {
		t.Fatalf("ForEach = %v, want nil", err)
	}
	if err := ForEach(nil, func(string) error { return errors.New("never called") }); err != nil {
		t.Fatalf("ForEach(nil) = %v, want nil", err)
	}
}
