package existing

import "testing"

func TestLoopback(t *testing.T) {
	t.Parallel()
	for server, want := range map[string]bool{
		"https://127.0.0.1:6443": true, "https://[::1]:6443": true, "https://localhost:6443": true,
		"https://172.18.0.2:6443": false, "https://api.example.com": false, "::not a url": false,
	} {
		if got := Loopback(server); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", server, got, want)
		}
	}
}
