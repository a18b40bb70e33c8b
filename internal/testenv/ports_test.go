package testenv

import (
	"context"
	"net"
	"testing"
	"time"
)

// A port taken between picking it and etcd's bind (another test package
// took it: it happened in `make integration`) makes Start try again on new
// ports instead of failing the test.
func TestIntegrationStartRetriesATakenPort(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping integration test in -short mode")
	}
	if _, _, err := Binaries(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	picks := 0
	pickPorts = func(n int) ([]int, error) {
		picks++
		ports, err := freePorts(n)
		if err == nil && picks == 1 {
			ports[0] = held.Addr().(*net.TCPAddr).Port // etcd's client port
		}
		return ports, err
	}
	defer func() { pickPorts = freePorts }()

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	env, err := Start(ctx)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer env.Stop()
	if picks != 2 {
		t.Fatalf("ports picked %d times, want 2 (once taken, once free)", picks)
	}
}
