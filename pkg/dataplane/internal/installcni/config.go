package installcni

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// confExtensions are the extensions libcni (as containerd and CRI-O call
// it) loads, in the roles it gives them.
var confExtensions = []string{".conf", ".conflist", ".json"}

var errInvalidConfig = errors.New("invalid CNI config")

// primaryConfig returns the config file the runtime would use: the first, in
// sorted order, that libcni would accept. "" means there is none yet.
func primaryConfig(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("listing CNI config dir: %w", err)
	}
	var names []string
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		if e.Type().IsRegular() || e.Type()&os.ModeSymlink != 0 {
			for _, want := range confExtensions {
				if ext == want {
					names = append(names, e.Name())
				}
			}
		}
	}
	sort.Strings(names)
	for _, n := range names {
		p := filepath.Join(dir, n)
		data, err := os.ReadFile(p)
		if err != nil {
			continue // vanished or unreadable: libcni would skip it too
		}
		if _, err := parseConfig(data, isList(p)); err == nil {
			return p, nil
		}
	}
	return "", nil
}

func isList(path string) bool { return strings.HasSuffix(path, ".conflist") }

// parseConfig validates as libcni does: a conflist needs a name and a
// non-empty plugins array of typed entries; a single conf needs a type.
func parseConfig(data []byte, list bool) (map[string]any, error) {
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%w: %w", errInvalidConfig, err)
	}
	if m == nil {
		return nil, fmt.Errorf("%w: not a JSON object", errInvalidConfig)
	}
	// libcni decodes these into strings and refuses anything else.
	for _, k := range []string{"cniVersion", "name"} {
		if v, ok := m[k]; ok {
			if _, isStr := v.(string); !isStr {
				return nil, fmt.Errorf("%w: %s is not a string", errInvalidConfig, k)
			}
		}
	}
	if !list {
		if t, _ := m["type"].(string); t == "" {
			return nil, fmt.Errorf("%w: missing type", errInvalidConfig)
		}
		return m, nil
	}
	if n, _ := m["name"].(string); n == "" {
		return nil, fmt.Errorf("%w: missing name", errInvalidConfig)
	}
	plugins, _ := m["plugins"].([]any)
	if len(plugins) == 0 {
		return nil, fmt.Errorf("%w: no plugins", errInvalidConfig)
	}
	for i, p := range plugins {
		pm, _ := p.(map[string]any)
		if t, _ := pm["type"].(string); t == "" {
			return nil, fmt.Errorf("%w: plugin %d has no type", errInvalidConfig, i)
		}
	}
	return m, nil
}

// injectEntry returns the conflist with entry as its last plugin, any older
// entry of the same type removed; a single conf is wrapped into a conflist
// the way libcni's ConfListFromConf does.
func injectEntry(data []byte, list bool, entry map[string]any) ([]byte, error) {
	m, err := parseConfig(data, list)
	if err != nil {
		return nil, err
	}
	if !list {
		conf := m
		m = map[string]any{"name": conf["name"], "plugins": []any{conf}}
		if v, ok := conf["cniVersion"]; ok {
			m["cniVersion"] = v
		}
		if n, _ := conf["name"].(string); n == "" {
			m["name"] = "k8s-pod-network" // a conflist needs one; a conf need not have it
		}
	}
	m["plugins"] = append(withoutType(m["plugins"].([]any), entry["type"]), entry)
	return marshal(m)
}

// removeEntry drops our entries; changed is false when there were none.
func removeEntry(data []byte, typ string) (out []byte, changed bool, err error) {
	m, err := parseConfig(data, true)
	if err != nil {
		return nil, false, err
	}
	plugins := m["plugins"].([]any)
	kept := withoutType(plugins, typ)
	if len(kept) == len(plugins) {
		return data, false, nil
	}
	m["plugins"] = kept
	out, err = marshal(m)
	return out, true, err
}

// hasEntry reports whether the conflist already ends with exactly entry:
// then there is nothing to repair and no write (no fsnotify echo).
func hasEntry(data []byte, entry map[string]any) bool {
	m, err := parseConfig(data, true)
	if err != nil {
		return false
	}
	plugins := m["plugins"].([]any)
	if len(withoutType(plugins, entry["type"])) != len(plugins)-1 {
		return false
	}
	last, err1 := json.Marshal(plugins[len(plugins)-1])
	want, err2 := json.Marshal(entry)
	return err1 == nil && err2 == nil && bytes.Equal(last, want)
}

func withoutType(plugins []any, typ any) []any {
	out := make([]any, 0, len(plugins))
	for _, p := range plugins {
		if pm, _ := p.(map[string]any); pm["type"] != typ {
			out = append(out, p)
		}
	}
	return out
}

func marshal(m map[string]any) ([]byte, error) {
	out, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding CNI config: %w", err)
	}
	return append(out, '\n'), nil
}
