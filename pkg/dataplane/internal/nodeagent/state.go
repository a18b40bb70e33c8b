package nodeagent

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
)

// stateFile records meshed pods across agent restarts. Only what cannot be
// recovered from the API server is kept: where each pod's netns is.
const stateFile = "pods.json"

type podRecord struct {
	Namespace      string `json:"namespace"`
	Name           string `json:"name"`
	ServiceAccount string `json:"serviceAccount"`
	Netns          string `json:"netns"`
	// IPs are the pod's addresses, for the probe SNAT set; the pod's
	// status may not list them yet when the plugin calls.
	IPs []netip.Addr `json:"ips,omitempty"`
}

func loadState(dir string) (map[string]podRecord, error) {
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return map[string]podRecord{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading agent state: %w", err)
	}
	recs := map[string]podRecord{}
	if err := json.Unmarshal(data, &recs); err != nil {
		// A corrupt file must not keep the agent from starting: the pods
		// still running are kept by the proxy (snapshot Keep) anyway.
		return map[string]podRecord{}, fmt.Errorf("decoding agent state (ignored): %w", err)
	}
	return recs, nil
}

// saveState writes via rename so a crash mid-write leaves the old state.
func saveState(dir string, recs map[string]podRecord) error {
	data, err := json.MarshalIndent(recs, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding agent state: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating state dir: %w", err)
	}
	tmp := filepath.Join(dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("writing agent state: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, stateFile)); err != nil {
		return fmt.Errorf("writing agent state: %w", err)
	}
	return nil
}
