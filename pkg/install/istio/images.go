package istio

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Images says which images Istio's charts run.
type Images struct {
	// Hub and Tag, when set, are global.hub and global.tag whatever the
	// values say (--istio-hub, --istio-tag). Unset, the values' own win,
	// and where they have none the offline build's are used: DefaultHub,
	// DefaultTag and imagePullPolicy IfNotPresent (side-loaded images must
	// never be pulled).
	Hub, Tag string
}

// Apply sets the images in a cluster's values (a copy's: v is not changed).
func (im Images) Apply(v map[string]any) map[string]any {
	out := copyMap(v)
	g, ok := out["global"].(map[string]any)
	if !ok {
		g = map[string]any{}
	}
	g = copyMap(g)
	out["global"] = g
	set := func(key, given, def string) {
		if given != "" {
			g[key] = given
		} else if s, _ := g[key].(string); s == "" {
			g[key] = def
		}
	}
	set("hub", im.Hub, DefaultHub)
	set("tag", im.Tag, DefaultTag())
	if g["hub"] == DefaultHub {
		if s, _ := g["imagePullPolicy"].(string); s == "" {
			g["imagePullPolicy"] = "IfNotPresent"
		}
		// The offline build has no variants; the ambient profile asks
		// for distroless ones, and only an explicit "" undoes that.
		if s, _ := g["variant"].(string); s == "" {
			g["variant"] = ""
		}
	}
	return out
}

func copyMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// PilotImage is the image istiod runs with values v, as Istio's istiod chart
// spells it: <hub>/<image>:<tag>[-<variant>], each from the pilot section,
// else the top level of the values, else global; an image with a "/" is
// used as it is.
func PilotImage(v map[string]any) string { return imageRef(v, "pilot", "pilot") }

// imageRef is the image of the chart whose section of the values is
// section (Istio's charts copy it over the top level), image def unless
// the values name one.
func imageRef(v map[string]any, section, def string) string {
	g, _ := v["global"].(map[string]any)
	sec, _ := v[section].(map[string]any)
	get := func(key string) string {
		for _, m := range []map[string]any{sec, v, g} {
			if s, _ := m[key].(string); s != "" {
				return s
			}
		}
		return ""
	}
	img := get("image")
	if img == "" {
		img = def
	}
	if strings.Contains(img, "/") {
		return img
	}
	ref := get("hub") + "/" + img + ":" + get("tag")
	if variant := get("variant"); variant != "" {
		ref += "-" + variant
	}
	return ref
}

// Docker runs the docker CLI.
type Docker func(ctx context.Context, args ...string) error

// ExecDocker runs the docker command on PATH; a failure carries its stderr.
func ExecDocker(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, "docker", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// SaveFromDocker writes those of refs the host's Docker has to one
// docker-archive in dir, with one `docker save` as `kind load docker-image`
// does with several images: layers they share are written once, and the
// archive goes to each node in one import (image.LoadArchives). found are
// those refs, in the order of refs; when Docker has none of them, path is
// "" and err nil, and nothing is saved.
func SaveFromDocker(ctx context.Context, docker Docker, dir string, refs ...string) (path string, found []string, err error) {
	for _, ref := range refs {
		if docker(ctx, "image", "inspect", "--format", "{{.Id}}", ref) == nil {
			found = append(found, ref)
		}
	}
	if len(found) == 0 {
		return "", nil, nil
	}
	what := strings.Join(found, ", ")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", found, fmt.Errorf("saving %s from docker: %w", what, err)
	}
	path = filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_").Replace(strings.Join(found, "+"))+".tar")
	if err := docker(ctx, append([]string{"save", "-o", path}, found...)...); err != nil {
		return "", found, fmt.Errorf("saving %s from docker: %w", what, err)
	}
	return path, found, nil
}
