package identity

import "testing"

func TestParse(t *testing.T) {
	t.Parallel()
	good := New("cluster.local", "default", "sleep")
	got, err := Parse(good.String())
	if err != nil || got != good {
		t.Fatalf("Parse(%q) = %v, %v; want %v", good.String(), got, err, good)
	}
	if good.URL().String() != good.String() {
		t.Errorf("URL() = %q, want %q", good.URL(), good.String())
	}
	for _, bad := range []string{
		"", "http://cluster.local/ns/a/sa/b", "spiffe://cluster.local/ns/a",
		"spiffe://cluster.local/ns/a/sa/b/extra", "spiffe:///ns/a/sa/b",
		"spiffe://td/ns//sa/b", "spiffe://td/xx/a/sa/b", "spiffe://td/ns/a/sa/b?x=1",
		"spiffe://u@td/ns/a/sa/b",
	} {
		if id, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = %v, want error", bad, id)
		}
	}
}
