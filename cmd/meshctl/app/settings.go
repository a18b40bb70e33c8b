package app

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// settings are a command's flags merged with MESHCTL_* environment variables
// and the config file, in viper's order: flag set on the command line, then
// environment, then config file, then the flag's default.
type settings struct {
	*viper.Viper
}

func loadSettings(cmd *cobra.Command) (*settings, error) {
	v := viper.New()
	v.SetEnvPrefix("MESHCTL")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	if err := v.BindPFlags(cmd.Flags()); err != nil {
		return nil, fmt.Errorf("binding flags: %w", err)
	}
	if err := v.BindPFlags(cmd.InheritedFlags()); err != nil {
		return nil, fmt.Errorf("binding flags: %w", err)
	}
	if path := v.GetString("config"); path != "" {
		if err := readConfig(v, path, knownKeys(cmd.Root())); err != nil {
			return nil, err
		}
	}
	return &settings{v}, nil
}

// readConfig merges a YAML config file into v. Unknown keys are an error:
// a misspelt setting silently ignored would build the wrong environment.
func readConfig(v *viper.Viper, path string, known map[string]bool) error {
	file := viper.New()
	file.SetConfigFile(path)
	file.SetConfigType("yaml")
	if err := file.ReadInConfig(); err != nil {
		return fmt.Errorf("reading config file %s: %w", path, err)
	}
	var unknown []string
	for _, k := range file.AllKeys() {
		if !known[k] || k == "config" {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("config file %s: unknown key(s) %s (keys are meshctl's flag names, e.g. clusters, networks, ip-family)", path, strings.Join(unknown, ", "))
	}
	if err := v.MergeConfigMap(file.AllSettings()); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	return nil
}

// knownKeys is every flag name of every command: one config file serves all
// commands, so `status` must not reject a file that sets `clusters`.
func knownKeys(root *cobra.Command) map[string]bool {
	keys := map[string]bool{}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		add := func(f *pflag.Flag) { keys[f.Name] = true }
		c.Flags().VisitAll(add)
		c.PersistentFlags().VisitAll(add)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return keys
}
