package installcni

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// kubeconfig renders the plugin's kubeconfig from the mounted service
// account: the plugin runs on the host, outside any pod, so it cannot use
// in-cluster config and needs the token and CA written out for it. JSON is
// valid kubeconfig and needs no YAML encoder.
func kubeconfig(saDir, server string) ([]byte, error) {
	token, err := os.ReadFile(filepath.Join(saDir, "token"))
	if err != nil {
		return nil, fmt.Errorf("reading service account token: %w", err)
	}
	ca, err := os.ReadFile(filepath.Join(saDir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("reading service account CA: %w", err)
	}
	cfg := map[string]any{
		"apiVersion": "v1",
		"kind":       "Config",
		"clusters": []any{map[string]any{"name": "local", "cluster": map[string]any{
			"server":                     server,
			"certificate-authority-data": base64.StdEncoding.EncodeToString(ca),
		}}},
		"users": []any{map[string]any{"name": "meshctl-cni", "user": map[string]any{"token": string(token)}}},
		"contexts": []any{map[string]any{"name": "meshctl-cni", "context": map[string]any{
			"cluster": "local", "user": "meshctl-cni",
		}}},
		"current-context": "meshctl-cni",
	}
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding kubeconfig: %w", err)
	}
	return append(out, '\n'), nil
}
