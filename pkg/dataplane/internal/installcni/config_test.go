package installcni

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

var testEntry = map[string]any{"type": "meshctl-cni", "agent_socket": "/run/a.sock"}

func plugins(t *testing.T, data []byte) []map[string]any {
	t.Helper()
	var m struct {
		Plugins []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, data)
	}
	return m.Plugins
}

func TestInjectEntry(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		in        string
		list      bool
		wantTypes []string
		wantName  string
		wantErr   bool
	}{
		{name: "conflist gets entry appended", list: true,
			in:        `{"cniVersion":"1.0.0","name":"kindnet","plugins":[{"type":"ptp"},{"type":"portmap"}]}`,
			wantTypes: []string{"ptp", "portmap", "meshctl-cni"}, wantName: "kindnet"},
		{name: "old entry replaced, not duplicated", list: true,
			in:        `{"name":"k","plugins":[{"type":"meshctl-cni","agent_socket":"/old"},{"type":"ptp"}]}`,
			wantTypes: []string{"ptp", "meshctl-cni"}, wantName: "k"},
		{name: "conf wrapped into a conflist", list: false,
			in:        `{"cniVersion":"0.3.1","name":"bridge-net","type":"bridge","bridge":"cni0"}`,
			wantTypes: []string{"bridge", "meshctl-cni"}, wantName: "bridge-net"},
		{name: "conf without name gets one", list: false,
			in: `{"type":"bridge"}`, wantTypes: []string{"bridge", "meshctl-cni"}, wantName: "k8s-pod-network"},
		{name: "conflist without name", list: true, in: `{"plugins":[{"type":"ptp"}]}`, wantErr: true},
		{name: "conflist without plugins", list: true, in: `{"name":"x","plugins":[]}`, wantErr: true},
		{name: "plugin without type", list: true, in: `{"name":"x","plugins":[{"foo":1}]}`, wantErr: true},
		{name: "conf without type", list: false, in: `{"name":"x"}`, wantErr: true},
		{name: "not JSON", list: true, in: `name: x`, wantErr: true},
		{name: "JSON null", list: false, in: `null`, wantErr: true},
	}
	for _, c := range cases {
		out, err := injectEntry([]byte(c.in), c.list, testEntry)
		if c.wantErr {
			if !errors.Is(err, errInvalidConfig) {
				t.Errorf("%s: err = %v, want errInvalidConfig", c.name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		var types []string
		for _, p := range plugins(t, out) {
			types = append(types, p["type"].(string))
		}
		if len(types) != len(c.wantTypes) {
			t.Errorf("%s: plugin types %v, want %v", c.name, types, c.wantTypes)
			continue
		}
		for i := range types {
			if types[i] != c.wantTypes[i] {
				t.Errorf("%s: plugin types %v, want %v", c.name, types, c.wantTypes)
			}
		}
		var top map[string]any
		json.Unmarshal(out, &top)
		if top["name"] != c.wantName {
			t.Errorf("%s: name %v, want %s", c.name, top["name"], c.wantName)
		}
		if !hasEntry(out, testEntry) {
			t.Errorf("%s: hasEntry false after inject", c.name)
		}
		back, changed, err := removeEntry(out, "meshctl-cni")
		if err != nil || !changed || len(plugins(t, back)) != len(c.wantTypes)-1 {
			t.Errorf("%s: removeEntry: changed=%v err=%v\n%s", c.name, changed, err, back)
		}
	}
}

func TestHasEntryWantsExactLastEntry(t *testing.T) {
	t.Parallel()
	for name, in := range map[string]string{
		"other settings": `{"name":"k","plugins":[{"type":"ptp"},{"type":"meshctl-cni","agent_socket":"/old"}]}`,
		"not last":       `{"name":"k","plugins":[{"type":"meshctl-cni","agent_socket":"/run/a.sock"},{"type":"ptp"}]}`,
		"twice":          `{"name":"k","plugins":[{"type":"meshctl-cni","agent_socket":"/run/a.sock"},{"type":"meshctl-cni","agent_socket":"/run/a.sock"}]}`,
		"absent":         `{"name":"k","plugins":[{"type":"ptp"}]}`,
	} {
		if hasEntry([]byte(in), testEntry) {
			t.Errorf("%s: hasEntry = true", name)
		}
	}
}

func TestPrimaryConfigAsLibcni(t *testing.T) {
	t.Parallel()
	write := func(dir, name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	if p, err := primaryConfig(dir); err != nil || p != "" {
		t.Fatalf("empty dir: %q, %v", p, err)
	}
	write(dir, "00-notes.txt", `{"type":"x"}`)                    // wrong extension
	write(dir, "01-broken.conflist", `{"name":"b","plugins":[]}`) // invalid: skipped
	write(dir, "02-garbage.conf", `{{{`)                          // invalid: skipped
	if p, _ := primaryConfig(dir); p != "" {
		t.Fatalf("only invalid configs: got %q", p)
	}
	write(dir, "20-late.conf", `{"type":"bridge"}`)
	write(dir, "10-kindnet.conflist", `{"name":"kindnet","plugins":[{"type":"ptp"}]}`)
	if p, _ := primaryConfig(dir); filepath.Base(p) != "10-kindnet.conflist" {
		t.Fatalf("got %q, want 10-kindnet.conflist", p)
	}
	write(dir, "05-json.json", `{"type":"macvlan"}`)
	if p, _ := primaryConfig(dir); filepath.Base(p) != "05-json.json" {
		t.Fatalf("got %q, want 05-json.json", p)
	}
	if _, err := primaryConfig(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("missing dir: no error")
	}
}

// FuzzInjectEntry: whatever a CNI left in its file, injection either refuses
// it as invalid or yields a valid conflist ending with our entry, and never
// panics.
func FuzzInjectEntry(f *testing.F) {
	f.Add([]byte(`{"cniVersion":"1.0.0","name":"kindnet","plugins":[{"type":"ptp"},{"type":"portmap"}]}`), true)
	f.Add([]byte(`{"cniVersion":"0.3.1","name":"b","type":"bridge"}`), false)
	f.Add([]byte(`{"name":"k","plugins":[{"type":"meshctl-cni"},{"type":"x"}]}`), true)
	f.Add([]byte(`{"name":"k","plugins":[null,1,"x"]}`), true)
	f.Add([]byte(`{"type":{"nested":true}}`), false)
	f.Add([]byte(`[]`), false)
	f.Fuzz(func(t *testing.T, data []byte, list bool) {
		out, err := injectEntry(data, list, testEntry)
		if err != nil {
			if !errors.Is(err, errInvalidConfig) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if _, err := parseConfig(out, true); err != nil {
			t.Fatalf("injected config invalid: %v\n%s", err, out)
		}
		if !hasEntry(out, testEntry) {
			t.Fatalf("entry missing after inject:\n%s", out)
		}
		again, err := injectEntry(out, true, testEntry)
		if err != nil || string(again) != string(out) {
			t.Fatalf("injection not idempotent:\n%s\n---\n%s", out, again)
		}
	})
}
