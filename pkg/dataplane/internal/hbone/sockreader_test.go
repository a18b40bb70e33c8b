package hbone

import (
	"testing"
)

// Reading a socket on the data path allocates nothing per read: a closure
// made per read would allocate its captured state each time (it did: about
// 14 objects per 1 KiB round trip through the two proxies), which the
// latency benchmark's tail paid for in garbage collection.
func TestSockReaderDoesNotAllocate(t *testing.T) {
	client, server := tcpPair(t)
	r := newSockReader(rawConn(server))
	msg := make([]byte, 1024)
	read := func() {
		if _, err := client.Write(msg); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < len(msg); {
			buf, n, err := r.read()
			if err != nil {
				t.Fatal(err)
			}
			bigBufs.Put(buf)
			got += n
		}
	}
	read() // the pool's first buffer
	if allocs := testing.AllocsPerRun(200, read); allocs > 0 {
		t.Errorf("%.1f allocations per write+read, want none", allocs)
	}
}
