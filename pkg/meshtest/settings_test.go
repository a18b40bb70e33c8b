package meshtest

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func newTestFlags(t *testing.T, args ...string) flagSet {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	vals := registerFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parsing %v: %v", args, err)
	}
	return vals
}

func env(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

func TestSettingsPrecedence(t *testing.T) {
	t.Parallel()
	base := defaultConfig()
	base.Clusters = 2 // what the suite asked for (an Option)
	base.Env = "suite"
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want func(c config) bool
	}{
		{"options when nothing else", nil, nil, func(c config) bool { return c.Clusters == 2 && c.Env == "suite" && !c.Reuse }},
		{"env over options", nil, map[string]string{"MESHTEST_CLUSTERS": "3", "MESHTEST_REUSE": "true", "MESHTEST_ENV": "ci"},
			func(c config) bool { return c.Clusters == 3 && c.Reuse && c.Env == "ci" }},
		{"flags over env", []string{"-meshtest.clusters=4", "-meshtest.reuse=false", "-meshtest.env", "dev"},
			map[string]string{"MESHTEST_CLUSTERS": "3", "MESHTEST_REUSE": "1", "MESHTEST_ENV": "ci"},
			func(c config) bool { return c.Clusters == 4 && !c.Reuse && c.Env == "dev" }},
		{"bool flags without a value", []string{"-meshtest.reuse", "-meshtest.keep"}, nil, func(c config) bool { return c.Reuse && c.Keep }},
		{"dashed names map to underscores", nil, map[string]string{"MESHTEST_REGISTRY_PORT": "5014", "MESHTEST_ECHO_IMAGE": "x:1", "MESHTEST_WAIT": "90s"},
			func(c config) bool {
				return c.Registry.Port == 5014 && c.EchoImage == "x:1" && c.Wait == 90*time.Second
			}},
		{"every setting has a flag", []string{"-meshtest.topology=t.json", "-meshtest.networks=2", "-meshtest.image=img", "-meshtest.artifacts=/a",
			"-meshtest.registry", "-meshtest.registry-name=r", "-meshtest.registry-image=ri"}, nil,
			func(c config) bool {
				return c.Topology == "t.json" && c.Networks == 2 && c.Image == "img" && c.Artifacts == "/a" &&
					c.Registry.Enabled && c.Registry.Name == "r" && c.Registry.Image == "ri"
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := newTestFlags(t, tc.args...).resolve(base, env(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if !tc.want(got) {
				t.Errorf("got %+v", got)
			}
		})
	}
}

func TestSettingsBadValues(t *testing.T) {
	t.Parallel()
	_, err := newTestFlags(t).resolve(defaultConfig(), env(map[string]string{
		"MESHTEST_CLUSTERS": "two", "MESHTEST_REUSE": "yes please", "MESHTEST_WAIT": "5", "MESHTEST_NETWORKS": "-1",
	}))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		`MESHTEST_CLUSTERS: want a whole number, got "two"`,
		`MESHTEST_REUSE: want true or false, got "yes please"`,
		`MESHTEST_WAIT: want a duration such as 5m, got "5"`,
		`MESHTEST_NETWORKS: want 0 or more, got -1`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q\nlacks %q", err, want)
		}
	}

	// A bad flag fails while flags are parsed, as the flag package does.
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	registerFlags(fs)
	err = fs.Parse([]string{"-meshtest.clusters=two"})
	if err == nil || !strings.Contains(err.Error(), `invalid value "two" for flag -meshtest.clusters: want a whole number`) {
		t.Errorf("parse error = %v", err)
	}
}

func TestCommandLineFlagsRegistered(t *testing.T) {
	t.Parallel()
	// `go test ./e2e/... -meshtest.reuse` works only if these exist on
	// flag.CommandLine before testing parses it.
	for _, name := range []string{"topology", "clusters", "reuse", "keep", "artifacts", "env", "image"} {
		f := flag.CommandLine.Lookup("meshtest." + name)
		if f == nil {
			t.Errorf("-meshtest.%s is not registered on flag.CommandLine", name)
			continue
		}
		if !strings.Contains(f.Usage, "MESHTEST_"+strings.ToUpper(name)) {
			t.Errorf("-meshtest.%s usage %q does not name its environment variable", name, f.Usage)
		}
	}
}
