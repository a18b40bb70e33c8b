package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/meshctl/meshctl/internal/fsutil"
)

// Roles a cluster can play in a mesh, as Istio's multicluster models name them.
const (
	RolePrimary = "primary" // runs a control plane
	RoleRemote  = "remote"  // has its control plane in another (primary) cluster
	RoleConfig  = "config"  // holds the mesh config for other clusters
)

// Spec is one cluster as the user asked for it: a topology entry, or one of
// the clusters that --clusters N generates. Empty fields take defaults when
// the Spec becomes part of a Plan.
type Spec struct {
	Name               string `json:"name"`
	Network            string `json:"network,omitempty"`
	PrimaryClusterName string `json:"primaryClusterName,omitempty"`
	ConfigClusterName  string `json:"configClusterName,omitempty"`
	// PodSubnet and ServiceSubnet are kind's syntax: one CIDR, or a v4 and a
	// v6 CIDR separated by a comma for dual stack.
	PodSubnet     string `json:"podSubnet,omitempty"`
	ServiceSubnet string `json:"serviceSubnet,omitempty"`
	// Kubeconfig is Istio's meta.kubeconfig, which Istio's test framework
	// reads a cluster's kubeconfig from: an entry that has one names an
	// existing cluster, used as it is and never created or deleted by
	// meshctl. LoadTopology resolves a relative path against the topology
	// file's directory (as the file's author sees it) and expands "~".
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// Context is meta.context: the kubeconfig context of the existing
	// cluster (default: the kubeconfig's current-context).
	Context string `json:"context,omitempty"`
	// PodNetworkRoutable is meta.podNetworkRoutable, a meshctl extension:
	// the user's statement that the existing cluster's pods and the kind
	// clusters' pods on the same network already reach each other. Without
	// it an existing cluster may not share a kind cluster's network, since
	// meshctl can route only between kind nodes.
	PodNetworkRoutable bool `json:"podNetworkRoutable,omitempty"`
	// Workers, IPFamily and Image are meshctl extensions of Istio's schema;
	// when empty, the environment-wide values apply.
	Workers  *int   `json:"workers,omitempty"`
	IPFamily string `json:"ipFamily,omitempty"`
	Image    string `json:"image,omitempty"`
	// Warnings are what reading the entry found and ignored (unknown
	// keys), each naming the file, the entry and the key. NewPlan passes
	// them on in Plan.Warnings.
	Warnings []string `json:"-"`
}

// topologyKeys maps every key an Istio topology entry may carry — camelCase
// and the snake_case aliases Istio's scripts accept — to its canonical name.
var topologyKeys = map[string]string{
	"kind":                 "kind",
	"clusterName":          "clusterName",
	"cluster_name":         "clusterName",
	"podSubnet":            "podSubnet",
	"pod_subnet":           "podSubnet",
	"svcSubnet":            "svcSubnet",
	"svc_subnet":           "svcSubnet",
	"network":              "network",
	"network_id":           "network",
	"primaryClusterName":   "primaryClusterName",
	"primary_cluster_name": "primaryClusterName",
	"configClusterName":    "configClusterName",
	"config_cluster_name":  "configClusterName",
	"meta":                 "meta",
	// Istio's test framework reads these; they mean nothing to meshctl but
	// are valid in the files it shares with Istio.
	"httpProxy":        "httpProxy",
	"proxyKubectlOnly": "proxyKubectlOnly",
	// meshctl extensions.
	"workers":   "workers",
	"ipFamily":  "ipFamily",
	"ip_family": "ipFamily",
	"image":     "image",
}

// Bounds on a topology: Istio's largest topologies are a few kilobytes and
// under ten clusters; anything far beyond is a mistake (--topology
// /dev/zero, a log file), refused before it is read into memory.
const (
	MaxTopologyBytes   = fsutil.MaxInputSize
	MaxTopologyEntries = 100
)

// LoadTopology reads a topology file: Istio's JSON array of clusters, or the
// same array written as YAML.
func LoadTopology(path string) ([]Spec, error) {
	data, err := fsutil.ReadFile(path, MaxTopologyBytes)
	if err != nil {
		return nil, fmt.Errorf("reading topology: %w", err)
	}
	specs, err := ParseTopology(data)
	if err != nil {
		return nil, fmt.Errorf("topology %s: %w", path, err)
	}
	for i := range specs {
		for j, w := range specs[i].Warnings {
			specs[i].Warnings[j] = "topology " + path + ": " + w
		}
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("topology %s: %w", path, err)
	}
	for i := range specs {
		if k := specs[i].Kubeconfig; k != "" && !filepath.IsAbs(k) {
			specs[i].Kubeconfig = filepath.Join(dir, k)
		}
	}
	return specs, nil
}

// expandHome expands a leading "~" the way a shell would have, since a
// topology file is not read by one.
func expandHome(path string) (string, error) {
	if path != "~" && !strings.HasPrefix(path, "~/") {
		return path, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("expanding %s: %w", path, err)
	}
	return filepath.Join(home, strings.TrimPrefix(path, "~")), nil
}

// ParseTopology decodes a topology document. Entries whose kind is set and is
// not "Kubernetes" (Istio's VMs, for example) are skipped. Unknown keys are
// ignored, as Istio's test framework ignores them (one of the topology files
// Istio ships carries controlPlaneClusterName, which nothing in Istio reads),
// with a warning in the entry's Spec.Warnings naming the entry and the key —
// and the key it was likely meant to be, since a misspelt podSubnet means
// default subnets.
func ParseTopology(data []byte) ([]Spec, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, fmt.Errorf("empty topology")
	}
	js, err := yaml.YAMLToJSON(data) // JSON is YAML, so one path serves both
	if err != nil {
		return nil, fmt.Errorf("not JSON or YAML: %w", err)
	}
	var entries []map[string]json.RawMessage
	if err := json.Unmarshal(js, &entries); err != nil {
		return nil, fmt.Errorf("want an array of cluster entries: %w", err)
	}
	if len(entries) > MaxTopologyEntries {
		return nil, fmt.Errorf("%d entries: a topology may have at most %d", len(entries), MaxTopologyEntries)
	}
	if dup := duplicateKey(data); dup != nil {
		// YAMLToJSON kept the last value: the user meant one of them.
		if dup.entry >= 0 && dup.entry < len(entries) {
			return nil, fmt.Errorf("entry %d%s: key %s is given twice", dup.entry, entryName(entries[dup.entry]), dup.key)
		}
		return nil, fmt.Errorf("key %s is given twice", dup.key)
	}
	var specs []Spec
	for i, raw := range entries {
		spec, skip, err := parseEntry(raw)
		if err != nil {
			return nil, fmt.Errorf("entry %d%s: %w", i, entryName(raw), err)
		}
		for j, k := range spec.Warnings {
			spec.Warnings[j] = fmt.Sprintf("entry %d%s: unknown key %q ignored%s", i, entryName(raw), k, unknownKeyHint(k))
		}
		if !skip {
			specs = append(specs, spec)
		}
	}
	if len(specs) == 0 {
		return nil, fmt.Errorf("no Kubernetes clusters in topology")
	}
	return specs, nil
}

// entryName names an entry in errors when it has a name to show.
func entryName(raw map[string]json.RawMessage) string {
	for _, k := range []string{"clusterName", "cluster_name"} {
		var s string
		if json.Unmarshal(raw[k], &s) == nil && s != "" {
			return fmt.Sprintf(" (cluster %q)", s)
		}
	}
	return ""
}

func parseEntry(raw map[string]json.RawMessage) (Spec, bool, error) {
	canon := map[string]json.RawMessage{}
	var unknown []string
	for k, v := range raw {
		c, ok := topologyKeys[k]
		if !ok {
			unknown = append(unknown, k)
			continue
		}
		if prev, dup := canon[c]; dup && !bytes.Equal(prev, v) {
			return Spec{}, false, fmt.Errorf("%s is given twice with different values (camelCase and snake_case)", c)
		}
		canon[c] = v
	}
	sort.Strings(unknown)
	str := func(key string) (string, error) {
		v, ok := canon[key]
		if !ok || string(v) == "null" {
			return "", nil
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return "", fmt.Errorf("%s: want a string, got %s", key, v)
		}
		return s, nil
	}
	s := Spec{Warnings: unknown}
	var err error
	kind, err := str("kind")
	if err != nil {
		return s, false, err
	}
	if kind != "" && kind != "Kubernetes" {
		if strings.EqualFold(kind, "Kubernetes") {
			// Istio's test framework matches kinds exactly and
			// refuses this entry; skipping it as a VM would drop a
			// cluster without a word.
			return s, false, fmt.Errorf("kind %q: write \"Kubernetes\" (kinds are case-sensitive, as in Istio's test framework)", kind)
		}
		return s, true, nil
	}
	for _, f := range []struct {
		key string
		dst *string
	}{
		{"clusterName", &s.Name},
		{"network", &s.Network},
		{"podSubnet", &s.PodSubnet},
		{"svcSubnet", &s.ServiceSubnet},
		{"primaryClusterName", &s.PrimaryClusterName},
		{"configClusterName", &s.ConfigClusterName},
		{"ipFamily", &s.IPFamily},
		{"image", &s.Image},
	} {
		if *f.dst, err = str(f.key); err != nil {
			return s, false, err
		}
	}
	if v, ok := canon["workers"]; ok {
		var n int
		if err := json.Unmarshal(v, &n); err != nil {
			return s, false, fmt.Errorf("workers: want a whole number, got %s", v)
		}
		s.Workers = &n
	}
	if v, ok := canon["meta"]; ok && string(v) != "null" {
		var meta map[string]any
		if err := json.Unmarshal(v, &meta); err != nil {
			return s, false, fmt.Errorf("meta: want an object, got %s", v)
		}
		// Other meta keys (Istio's fakeVM, say) are Istio's business and
		// are left alone.
		if kc, ok := meta["kubeconfig"]; ok {
			path, isStr := kc.(string)
			if !isStr || path == "" {
				return s, false, fmt.Errorf("meta.kubeconfig: want a non-empty string (the path of an existing cluster's kubeconfig)")
			}
			if s.Kubeconfig, err = expandHome(path); err != nil {
				return s, false, fmt.Errorf("meta.kubeconfig: %w", err)
			}
		}
		if v, ok := meta["context"]; ok {
			ctx, isStr := v.(string)
			if !isStr || ctx == "" {
				return s, false, fmt.Errorf("meta.context: want a non-empty string (a context of meta.kubeconfig)")
			}
			s.Context = ctx
		}
		if v, ok := meta["podNetworkRoutable"]; ok {
			b, isBool := v.(bool)
			if !isBool {
				return s, false, fmt.Errorf("meta.podNetworkRoutable: want true or false")
			}
			s.PodNetworkRoutable = b
		}
		for _, k := range []string{"context", "podNetworkRoutable"} {
			if _, ok := meta[k]; ok && s.Kubeconfig == "" {
				return s, false, fmt.Errorf("meta.%s applies to an existing cluster: give meta.kubeconfig too", k)
			}
		}
	}
	if s.Name == "" {
		return s, false, fmt.Errorf("clusterName is required")
	}
	return s, false, nil
}

// yamlDupKey matches the strict YAML decoder's complaint about a duplicate.
var yamlDupKey = regexp.MustCompile(`line (\d+): key ("[^"]*") already set`)

// dupKey is a key given twice in one object of a topology.
type dupKey struct {
	entry int    // index of the top-level entry it is in, or -1
	key   string // dotted path within the entry: "podSubnet", "meta.kubeconfig"
}

// duplicateKey finds a key given twice in one object. JSON and YAML decoders
// keep the last value silently, so a topology with two podSubnets would get
// whichever came last. YAML that is not JSON is checked by the strict YAML
// decoder, which names the line instead of the entry.
func duplicateKey(data []byte) *dupKey {
	if !json.Valid(data) {
		if _, err := yaml.YAMLToJSONStrict(data); err != nil {
			if m := yamlDupKey.FindStringSubmatch(err.Error()); m != nil {
				return &dupKey{entry: -1, key: m[2] + " (line " + m[1] + ")"}
			}
		}
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var found *dupKey
	var walk func(entry int, path string) bool
	walk = func(entry int, path string) bool {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return false
				}
				k, _ := kt.(string)
				full := k
				if path != "" {
					full = path + "." + k
				}
				if seen[k] {
					found = &dupKey{entry: entry, key: strconv.Quote(full)}
					return false
				}
				seen[k] = true
				if !walk(entry, full) {
					return false
				}
			}
		case json.Delim('['):
			for i := 0; dec.More(); i++ {
				e := entry
				if entry < 0 && path == "" {
					e = i // a top-level array's elements are the entries
				}
				if !walk(e, path) {
					return false
				}
			}
		default:
			return true // a scalar
		}
		_, err = dec.Token() // the closing delimiter
		return err == nil
	}
	walk(-1, "")
	return found
}

// unknownKeyHint says which known key an unknown one was likely meant to be:
// one that differs in case or by a letter or two.
func unknownKeyHint(key string) string {
	if key == "controlPlaneClusterName" {
		// In Istio's multicluster-large.json; Istio's framework reads no
		// such key, so the entry is a primary there as it is here.
		return " (Istio's test framework ignores it too: the cluster's primary is primaryClusterName)"
	}
	best, bestDist := "", 3
	for k := range topologyKeys {
		d := editDistance(strings.ToLower(key), strings.ToLower(k))
		if d < bestDist || (d == bestDist && k < best) {
			best, bestDist = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance of two short strings.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
