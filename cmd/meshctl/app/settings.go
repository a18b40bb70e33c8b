package app

import (
	"bytes"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/meshctl/meshctl/internal/fsutil"
)

// loadSettings fills the flags of cmd that the command line left unset: from
// MESHCTL_<FLAG> when set (and not empty), else from the config file's key of
// the flag's name, else the flag keeps its default. Either way the text goes
// through the flag's own parser, so `MESHCTL_DRY_RUN=maybe` or
// `clusters: 2.7` is an error naming the variable or key, never a silent
// zero. config is the root's --config, already parsed.
func loadSettings(cmd *cobra.Command, config *string) error {
	fs := cmd.Flags()
	fromEnv := map[string]bool{}
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if _, ok := f.Value.(setting); !ok || err != nil || f.Changed {
			return // not one of meshctl's (cobra's --help), or given
		}
		name := envName(f.Name)
		v, ok := os.LookupEnv(name)
		if !ok || v == "" {
			return
		}
		if e := f.Value.Set(v); e != nil {
			err = fmt.Errorf("environment variable %s=%s: %w", name, quoteShort(v), e)
			return
		}
		fromEnv[f.Name] = true
	})
	if err != nil || *config == "" {
		return err
	}
	file, err := readConfig(*config, knownKeys(cmd.Root()))
	if err != nil {
		return err
	}
	fs.VisitAll(func(f *pflag.Flag) {
		raw, inFile := file[f.Name]
		s, ok := f.Value.(setting)
		if !ok || err != nil || f.Changed || fromEnv[f.Name] || !inFile {
			return
		}
		if e := s.setConfig(raw); e != nil {
			err = fmt.Errorf("config file %s: key %s: %w", *config, f.Name, e)
		}
	})
	return err
}

// envName is the environment variable of a flag: MESHCTL_IP_FAMILY for
// --ip-family.
func envName(flag string) string {
	return "MESHCTL_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// readConfig reads a YAML config file into its keys' values. Unknown keys
// are an error: a misspelt setting silently ignored would build the wrong
// environment.
func readConfig(path string, known map[string]bool) (map[string]any, error) {
	data, err := fsutil.ReadFile(path, fsutil.MaxInputSize)
	if err != nil {
		return nil, fmt.Errorf("reading config file %s: %w", path, err)
	}
	file := viper.New()
	file.SetConfigType("yaml")
	if err := file.ReadConfig(bytes.NewReader(data)); err != nil {
		return nil, fmt.Errorf("reading config file %s: %w", path, err)
	}
	var unknown []string
	values := map[string]any{}
	for _, k := range file.AllKeys() {
		if !known[k] || k == "config" {
			unknown = append(unknown, k)
			continue
		}
		values[k] = file.Get(k)
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("config file %s: unknown key(s) %s (keys are meshctl's flag names, e.g. clusters, networks, ip-family)", path, strings.Join(unknown, ", "))
	}
	return values, nil
}

// knownKeys is every setting of every command: one config file serves all
// commands, so `status` must not reject a file that sets `clusters`.
func knownKeys(root *cobra.Command) map[string]bool {
	keys := map[string]bool{}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		add := func(f *pflag.Flag) {
			if _, ok := f.Value.(setting); ok {
				keys[f.Name] = true
			}
		}
		c.Flags().VisitAll(add)
		c.PersistentFlags().VisitAll(add)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return keys
}
